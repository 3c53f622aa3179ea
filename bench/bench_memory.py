"""L1 snapshot and restore + verify, beside raw Redis and PostgreSQL reads (issue 4).

    .venv/bin/python bench/bench_memory.py [--quick]

Two agents: 100 keys / about 100 KB (40 short strings, 25 lists of 100 floats,
25 cached API responses as JSON strings, 10 chat message lists, fixed seed) and
10,000 keys (the same mix a hundred times, about 10 MB). For each: snapshot to the
Redis secondary, dual snapshot (secondary + the checkpoint's PostgreSQL row), restore
+ verify from the secondary and from PostgreSQL after the agent's L1 is deleted, and in
the same rounds the raw GET / SET / SELECT of the same snapshot bytes.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    BenchAgent,
    Engines,
    Payload,
    Row,
    engines,
    header,
    make_agent,
    quick_flag,
    series,
    stats,
    table,
)

GOALS_MS: dict[int, tuple[float, float, float, str]] = {
    # agent keys: (snapshot, restore+verify from Redis, from PostgreSQL, source)
    100: (2.0, 5.0, 10.0, "issue 4"),
    10_000: (100.0, 5000.0, 30000.0, "DD-016"),
}

SELECT_SNAPSHOT = (
    "SELECT l1_snapshot, l1_snapshot_hash, l1_snapshot_seq FROM agent_checkpoints"
    " WHERE analysis_id = %s AND agent_type = %s AND l1_snapshot IS NOT NULL"
    " ORDER BY id DESC LIMIT 1"
)


def bench_agent(eng: Engines, scale: int, n: int, budget_s: float, rows: list[Row | str]) -> None:
    stack = eng.stack
    snapshotter, restorer = stack.snapshotter, stack.restorer
    payload = Payload.make(scale=scale)
    agent: BenchAgent = make_agent(stack, None)
    payload.write_l1(agent.l1_cache)
    aid, atype, agent_id = agent.analysis_id, agent.agent_type, agent.agent_id
    cid = stack.checkpointer.save_checkpoint(agent, "gather").checkpoint_id
    snapshotter.snapshot_on_checkpoint(agent_id, cid, dual_write=True)
    snap_key = stack.keys.l1_snapshot(agent_id)
    blob = snapshotter.take(agent_id, full=True).pack()  # the raw engine's baseline: one value
    raw_key = f"{eng.prefix}:bench:raw:{agent_id}"
    stack.redis.set(raw_key, blob)
    keys = len(payload.values)
    size = f"{keys:,} keys"

    def raw_get(i: int) -> None:
        assert len(stack.redis.get(raw_key) or b"") == len(blob)

    def raw_set(i: int) -> None:
        stack.redis.set(raw_key, blob, px=3_600_000)

    def raw_select(i: int) -> None:
        with stack.pg.connection() as conn:
            row = conn.execute(SELECT_SNAPSHOT, (aid, atype)).fetchone()
        assert row is not None and row[0]

    def restore(source: str) -> Any:
        report = restorer.restore_from_snapshot(agent_id, aid, atype)
        assert report is not None and report.source == source and report.keys == keys, report
        return report

    def clear_l1(i: int) -> None:
        agent.l1_cache.clear()

    write = series({
        "snapshot": lambda i: snapshotter.snapshot_on_checkpoint(agent_id),
        "dual": lambda i: snapshotter.snapshot_on_checkpoint(agent_id, cid, dual_write=True),
        "raw_set": raw_set,
        "raw_get": raw_get,
    }, n, budget_s=budget_s)  # fmt: skip
    from_redis = series({
        "restore": lambda i: restore("redis_secondary"),
        "raw_get": raw_get,
    }, n, before=clear_l1, budget_s=budget_s)  # fmt: skip
    stack.redis.delete(snap_key, stack.keys.l1_snapshot_meta(agent_id))
    from_pg = series({
        "restore": lambda i: restore("postgresql_checkpoint"),
        "raw_select": raw_select,
    }, n, before=clear_l1, budget_s=budget_s)  # fmt: skip

    changed_5 = series({
        "snapshot": lambda i: snapshotter.snapshot_on_checkpoint(agent_id),
    }, n, before=lambda i: payload.write_l1(agent.l1_cache, payload.change(5)),
        budget_s=budget_s)  # fmt: skip
    full = series({
        "snapshot": lambda i: snapshotter.store(snapshotter.take(agent_id, full=True)),
    }, n, budget_s=budget_s)  # fmt: skip
    w = {k: stats(v) for k, v in write.items()}
    w["changed_5"] = stats(changed_5["snapshot"])
    w["full"] = stats(full["snapshot"])
    r = {k: stats(v) for k, v in from_redis.items()}
    p = {k: stats(v) for k, v in from_pg.items()}
    goals = GOALS_MS.get(keys)

    def goal(k: int, st: Any) -> tuple[str, bool | None]:
        return (f"p50 <= {goals[k]:g} ms ({goals[3]})", st.p50 <= goals[k]) if goals else ("", None)

    rows.append(f"{size}, {payload.json_bytes() / 1e6:.2f} MB as JSON, "
                f"snapshot {len(blob) / 1e3:,.0f} KB zstd")  # fmt: skip
    rows.append(Row("snapshot to secondary, nothing changed", w["snapshot"],
                    w["snapshot"].p50 / w["raw_set"].p50, "raw SET"))  # fmt: skip
    rows.append(Row("snapshot to secondary, 5% of keys changed", w["changed_5"],
                    w["changed_5"].p50 / w["raw_set"].p50, "raw SET",
                    *goal(0, w["changed_5"])))  # fmt: skip
    rows.append(Row("snapshot to secondary, every key read", w["full"],
                    w["full"].p50 / w["raw_set"].p50, "raw SET", *goal(0, w["full"])))  # fmt: skip
    rows.append(Row("dual snapshot (secondary + PostgreSQL)", w["dual"],
                    w["dual"].p50 / w["raw_set"].p50, "raw SET"))  # fmt: skip
    rows.append(Row("raw SET of the snapshot bytes", w["raw_set"]))
    rows.append(Row("raw GET of the snapshot bytes", w["raw_get"]))
    rows.append(Row("restore + verify from secondary", r["restore"],
                    r["restore"].p50 / r["raw_get"].p50, "raw GET",
                    *goal(1, r["restore"])))  # fmt: skip
    rows.append(Row("restore + verify from PostgreSQL", p["restore"],
                    p["restore"].p50 / p["raw_select"].p50, "raw SELECT",
                    *goal(2, p["restore"])))  # fmt: skip
    rows.append(Row("raw SELECT of the snapshot bytes", p["raw_select"]))
    agent.l1_cache.clear()
    stack.redis.delete(raw_key)


def main() -> None:
    quick = quick_flag()
    with engines("bench-memory") as eng:
        header("bench_memory: L1 snapshot and restore + verify vs raw Redis / PostgreSQL", eng,
               {"agents": "100 keys (~100 KB) and 10,000 keys (~10 MB), same value mix",
                "iterations": ("quick: 5 per op" if quick else "100 keys: 300 per op, "
                               "10,000 keys: 10 per op") + " (fewer if the time budget runs "
                               "out; see n); L1 deleted with AgentMemory.clear() before "
                               "each restore"})  # fmt: skip
        rows: list[Row | str] = []
        if quick:
            bench_agent(eng, 1, 5, 5.0, rows)
            bench_agent(eng, 10, 3, 5.0, rows)
        else:
            bench_agent(eng, 1, 300, 15.0, rows)
            bench_agent(eng, 100, 10, 30.0, rows)
        table(rows)
        print("ratio: amber p50 / raw p50 in the same rounds. ops/s: n / total time.")


if __name__ == "__main__":
    main()
