"""save_checkpoint / restore_checkpoint against LangGraph's PostgresSaver (issue 3).

    .venv/bin/python bench/bench_checkpoint.py [--quick]

The payload: about 100 KB in 100 values (40 short strings, 25 lists of 100 floats,
25 cached API responses, 10 chat message lists) from a fixed seed. It is the agent's
working memory (L1, in Redis), which every checkpoint snapshots; the checkpoint's own
state (progress, a small deliverable) is small, as in a real agent. LangGraph gets the
same 100 values as its channel values, on the same PostgreSQL, in the same run,
interleaved round by round with amber's calls.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    BenchAgent,
    Engines,
    Payload,
    Row,
    engines,
    have_langgraph,
    header,
    make_agent,
    quick_flag,
    series,
    stats,
    table,
)

from amber.checkpoints.store import AgentCheckpointer

SAVE_GOAL = 0.5
"""amber's save p50 at most this fraction of PostgresSaver.put's (2x faster)."""
RESTORE_REDIS_GOAL_MS = 1.0
RESTORE_PG_GOAL_MS = 1.5
FLAT_GOAL = 1.25
"""Restore with 10,000 earlier checkpoints at most this many times the one with none."""

COPY_CHECKPOINTS = """
INSERT INTO agent_checkpoints (checkpoint_id, seq, stock_ticker, agent_type, agent_id,
    analysis_id, checkpoint_time, progress_pct, current_subtask, completed_subtasks,
    pending_subtasks, failure_reason, retry_count, agent_version, state, state_sha256, state_size,
    l1_snapshot, l1_snapshot_hash, l1_snapshot_seq, l1_snapshot_size)
SELECT gen_random_uuid(), seq - g, stock_ticker, agent_type, agent_id, analysis_id,
    checkpoint_time - make_interval(secs => g), progress_pct, current_subtask, completed_subtasks,
    pending_subtasks, failure_reason, retry_count, agent_version, state, state_sha256, state_size,
    l1_snapshot, l1_snapshot_hash, l1_snapshot_seq, l1_snapshot_size
FROM agent_checkpoints, generate_series(1, %s) AS g WHERE checkpoint_id = %s
"""

LG_COPY_CHECKPOINTS = """
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
    checkpoint, metadata)
SELECT thread_id, checkpoint_ns, '00000000-0000-6000-8000-' || lpad(to_hex(g), 12, '0'), NULL,
    checkpoint, metadata
FROM checkpoints, generate_series(1, %s) AS g WHERE thread_id = %s
"""

LG_COPY_BLOBS = """
INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
SELECT thread_id, checkpoint_ns, channel, 'h' || g || '.' || version, type, blob
FROM checkpoint_blobs, generate_series(1, %s) AS g WHERE thread_id = %s
"""


class LGThread:
    """One LangGraph thread whose channel values are a payload's values."""

    def __init__(self, saver: Any, values: dict[str, Any]) -> None:
        self.saver = saver
        self.values = values
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": f"bench-{uuid.uuid4().hex}", "checkpoint_ns": ""}
        }
        self.versions: dict[str, str] = {}
        self.step = 0

    @property
    def thread_id(self) -> str:
        return str(self.config["configurable"]["thread_id"])

    def put(self, changed: list[str]) -> None:
        """A checkpoint holding every value, with new versions for ``changed`` only."""
        from langgraph.checkpoint.base import empty_checkpoint

        self.step += 1
        for k in changed:
            self.versions[k] = self.saver.get_next_version(self.versions.get(k), None)
        cp = empty_checkpoint()
        cp["channel_values"] = dict(self.values)
        cp["channel_versions"] = dict(self.versions)
        new_versions = {k: self.versions[k] for k in changed}
        self.config = self.saver.put(
            self.config, cp, {"source": "loop", "step": self.step, "parents": {}}, new_versions
        )

    def get(self) -> Any:
        latest = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ""}}
        tup = self.saver.get_tuple(latest)
        assert tup is not None and len(tup.checkpoint["channel_values"]) == len(self.values)
        return tup


def bench_save(eng: Engines, saver: Any, n: int, rows: list[Row | str]) -> None:
    cp = eng.stack.checkpointer
    for label, count in (("5 of 100 values change", 5), ("all 100 values change", None)):
        payload = Payload.make()
        agent = make_agent(eng.stack, payload)
        thread = LGThread(saver, payload.values) if saver else None
        if thread:
            thread.put(list(payload.values))
        changed: list[str] = []

        def before(i: int, payload: Payload = payload, agent: BenchAgent = agent,
                   count: int | None = count, changed: list[str] = changed) -> None:  # fmt: skip
            changed[:] = payload.change(count)
            payload.write_l1(agent.l1_cache, changed)

        ops = {
            "hybrid": lambda i, agent=agent: cp.save_checkpoint(agent, "gather"),
            "checkpoint": lambda i, agent=agent: cp.save_checkpoint(
                agent, "gather", dual_write=True
            ),
        }
        if thread:
            ops["langgraph"] = lambda i, thread=thread, changed=changed: thread.put(changed)
        out = series(ops, n, before=before, budget_s=35.0)
        st = {k: stats(v) for k, v in out.items()}
        rows.append(f"save, {label}")
        lg = st.get("langgraph")
        for mode, name in (("hybrid", "amber save_checkpoint hybrid"),
                           ("checkpoint", "amber save_checkpoint checkpoint (dual)")):  # fmt: skip
            ratio = st[mode].p50 / lg.p50 if lg else None
            rows.append(Row(name, st[mode], ratio, "LG put" if lg else "", f"<= {SAVE_GOAL}x LG",
                            None if ratio is None else ratio <= SAVE_GOAL))  # fmt: skip
        if lg:
            rows.append(Row("langgraph PostgresSaver.put", lg))


def _restore_agent(eng: Engines, seed: int, earlier: int) -> BenchAgent:
    """An agent whose latest checkpoint holds a full payload, after ``earlier`` others:
    the newest two of them full-size too, the rest tiny rows bulk-copied."""
    cp = eng.stack.checkpointer
    agent = make_agent(eng.stack, None)
    full_before = min(earlier, 2)
    if tiny := earlier - full_before:
        agent.l1_cache.set("tiny", "x")
        agent.interim_results = {"tiny": 1}
        first = cp.save_checkpoint(agent, None)
        with eng.stack.pg.connection() as conn:
            conn.execute(COPY_CHECKPOINTS, (tiny - 1, first.checkpoint_id))
            conn.execute("ANALYZE agent_checkpoints")
        agent.l1_cache.delete("tiny")
    payload = Payload.make(seed=seed)
    agent.interim_results = {"gather": {"values": len(payload.values), "status": "ok"}}
    payload.write_l1(agent.l1_cache)
    for _ in range(full_before + 1):
        cp.save_checkpoint(agent, "gather")
        payload.write_l1(agent.l1_cache, payload.change(5))
    with eng.stack.pg.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM agent_checkpoints WHERE analysis_id = %s",
            (agent.analysis_id,),
        ).fetchone()
    assert row is not None and row[0] == earlier + 1, (row, earlier)
    return agent


def _lg_thread(saver: Any, seed: int, history: int) -> LGThread:
    payload = Payload.make(seed=seed)
    if not history:
        thread = LGThread(saver, payload.values)
        thread.put(list(payload.values))
        return thread
    tiny = {f"tiny:{i}": [i] for i in range(5)}
    thread = LGThread(saver, tiny)
    thread.put(list(tiny))
    with saver.conn.cursor() as cur:
        cur.execute(LG_COPY_CHECKPOINTS, (history - 3, thread.thread_id))
        cur.execute(LG_COPY_BLOBS, (history - 3, thread.thread_id))
        cur.execute("ANALYZE checkpoints")  # as autovacuum would; stale stats: 25x slower
        cur.execute("ANALYZE checkpoint_blobs")
    thread.values, thread.versions = payload.values, {}
    thread.put(list(payload.values))
    for _ in range(2):
        thread.put(payload.change(5))
    return thread


def bench_restore(eng: Engines, saver: Any, n: int, history: int, rows: list[Row | str]) -> None:
    stack = eng.stack
    cp: AgentCheckpointer = stack.checkpointer
    one, three = _restore_agent(eng, 101, 0), _restore_agent(eng, 103, 2)
    many = _restore_agent(eng, 102, history)
    lg_one = _lg_thread(saver, 101, 0) if saver else None
    lg_many = _lg_thread(saver, 102, history) if saver else None
    hist = f"{history:,} earlier"

    def restore(agent: BenchAgent, source: str) -> Any:
        r = cp.restore_checkpoint(agent.analysis_id, agent.agent_type, agent_id=agent.agent_id)
        assert r.source == source, r
        assert r.checkpoint.interim_results["gather"]["values"] == 100
        return r

    def raw_get(agent: BenchAgent) -> bytes:
        blob = stack.redis.get(stack.keys.checkpoint(agent.agent_id))
        assert blob
        return bytes(blob)

    def raw_select(agent: BenchAgent, limit: int) -> list[Any]:
        with stack.pg.connection() as conn:
            return conn.execute(
                "SELECT checkpoint_id, state, state_sha256 FROM agent_checkpoints"
                " WHERE analysis_id = %s AND agent_type = %s ORDER BY id DESC LIMIT %s",
                (agent.analysis_id, agent.agent_type, limit),
            ).fetchall()

    lg_ops: dict[str, Any] = {}
    if lg_one and lg_many:
        lg_ops = {"lg_one": lambda i: lg_one.get(), "lg_many": lambda i: lg_many.get()}
    redis_out = series({
        "one": lambda i: restore(one, "redis_backup"),
        "many": lambda i: restore(many, "redis_backup"),
        "three": lambda i: restore(three, "redis_backup"),
        "raw_get": lambda i: raw_get(one),
        **lg_ops,
    }, n, warmup=20, budget_s=25.0)  # fmt: skip
    stack.redis.delete(*(stack.keys.checkpoint(a.agent_id) for a in (one, three, many)))
    pg_out = series({
        "one": lambda i: restore(one, "postgresql"),
        "many": lambda i: restore(many, "postgresql"),
        "three": lambda i: restore(three, "postgresql"),
        "raw_select1": lambda i: raw_select(one, 1),
        "raw_select3_many": lambda i: raw_select(many, 3),
        **lg_ops,
    }, n, warmup=20, budget_s=25.0)  # fmt: skip
    rs = {k: stats(v) for k, v in redis_out.items()}
    ps = {k: stats(v) for k, v in pg_out.items()}
    lg1, lgm = rs.get("lg_one"), rs.get("lg_many")

    def vs_lg(st: Any, lg: Any) -> tuple[float | None, str]:
        return (st.p50 / lg.p50, "LG get_tuple") if lg else (None, "")

    rows.append("restore_checkpoint from the Redis backup")
    for key, label, lg in (("one", "1 checkpoint", lg1), ("many", hist, lgm)):
        ratio, vs = vs_lg(rs[key], lg)
        rows.append(Row(f"amber restore, {label}", rs[key], ratio, vs,
                        f"p50 <= {RESTORE_REDIS_GOAL_MS} ms",
                        rs[key].p50 <= RESTORE_REDIS_GOAL_MS))  # fmt: skip
    flat = rs["many"].p50 / rs["one"].p50
    rows.append(Row(f"  flatness: {hist} / 1", rs["many"], flat, "amber 1 cp",
                    f"<= {FLAT_GOAL}x", flat <= FLAT_GOAL))  # fmt: skip
    rows.append(Row("  3 checkpoints (2 earlier)", rs["three"]))
    rows.append(Row("raw Redis GET of the backup", rs["raw_get"]))
    rows.append("restore_checkpoint from PostgreSQL (backup deleted)")
    for key, label, lg in (("one", "1 checkpoint", ps.get("lg_one")),
                           ("many", hist, ps.get("lg_many"))):  # fmt: skip
        ratio, vs = vs_lg(ps[key], lg)
        rows.append(Row(f"amber restore, {label}", ps[key], ratio, vs,
                        f"p50 <= {RESTORE_PG_GOAL_MS} ms",
                        ps[key].p50 <= RESTORE_PG_GOAL_MS))  # fmt: skip
    flat = ps["many"].p50 / ps["one"].p50
    rows.append(Row(f"  flatness: {hist} / 1", ps["many"], flat, "amber 1 cp",
                    f"<= {FLAT_GOAL}x", flat <= FLAT_GOAL))  # fmt: skip
    rows.append(Row("  3 checkpoints (2 earlier)", ps["three"], ps["three"].p50 / ps["one"].p50,
                    "amber 1 cp"))  # fmt: skip
    rows.append(Row("raw SELECT state, LIMIT 1 (1 cp)", ps["raw_select1"]))
    rows.append(Row(f"raw SELECT state, LIMIT 3 ({hist})", ps["raw_select3_many"],
                    ps["raw_select3_many"].p50 / ps["raw_select1"].p50, "LIMIT 1"))  # fmt: skip
    if lg1 and lgm:
        rows.append("LangGraph PostgresSaver.get_tuple (latest)")
        rows.append(Row("langgraph get_tuple, 1 checkpoint", lg1))
        rows.append(Row(f"langgraph get_tuple, {hist}", lgm, lgm.p50 / lg1.p50, "LG 1 cp"))


def bench_storage(eng: Engines, n: int, rows: list[Row | str]) -> None:
    """DD-011 names JSONB; amber stores zstd canonical JSON in BYTEA. Same snapshot, both ways."""
    from amber import codec
    from amber.memory.snapshot import read_memory

    agent = make_agent(eng.stack, Payload.make())
    snap = read_memory(eng.stack.redis, eng.stack.keys, agent.agent_id)
    doc = codec.canonical_document(snap.canonical)
    text = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()
    with eng.stack.pg.connection() as conn:
        conn.execute("CREATE TEMP TABLE bench_jsonb (id serial PRIMARY KEY, v jsonb)")
        conn.execute("CREATE TEMP TABLE bench_bytea (id serial PRIMARY KEY, v bytea)")
        conn.execute("INSERT INTO bench_jsonb (v) VALUES (%s::jsonb)", (text,))
        conn.execute("INSERT INTO bench_bytea (v) VALUES (%s)", (snap.pack(),))

        def latest(table: str) -> Any:
            row = conn.execute(f"SELECT v FROM {table} ORDER BY id DESC LIMIT 1").fetchone()
            return row[0] if row else None

        ops = {
            "insert jsonb": lambda i: conn.execute(
                "INSERT INTO bench_jsonb (v) VALUES (%s::jsonb)", (text,)
            ),
            "insert bytea": lambda i: conn.execute(
                "INSERT INTO bench_bytea (v) VALUES (%s)", (snap.pack(),)
            ),
            "read jsonb": lambda i: codec.memory_from_document(latest("bench_jsonb")),
            "read bytea": lambda i: codec.unpack_memory(latest("bench_bytea")),
        }
        st = {k: stats(v) for k, v in series(ops, n, budget_s=20.0).items()}
        conn.execute("DROP TABLE bench_jsonb, bench_bytea")
    size = f"{len(text.encode()) // 1024} KB JSON, {len(snap.pack()) // 1024} KB zstd"
    rows.append(f"storing the 100-key snapshot in PostgreSQL ({size})")
    for op in ("insert", "read"):
        bytea, jsonb = st[f"{op} bytea"], st[f"{op} jsonb"]
        rows.append(
            Row(
                f"{op} + encode/decode, BYTEA zstd (amber)",
                bytea,
                bytea.p50 / jsonb.p50,
                f"{op} JSONB",
            )
        )
        rows.append(Row(f"{op} + encode/decode, JSONB (DD-011)", jsonb))


def main() -> None:
    quick = quick_flag()
    n_save, n_restore = (10, 20) if quick else (300, 1000)
    history = 1_000 if quick else 10_000
    with engines("bench-checkpoint") as eng:
        saver: Any = None
        ctx: Any = None
        if have_langgraph():
            from langgraph.checkpoint.postgres import PostgresSaver

            ctx = PostgresSaver.from_conn_string(eng.database_url)
            saver = ctx.__enter__()
            saver.setup()
        try:
            payload = Payload.make()
            header("bench_checkpoint: amber save/restore_checkpoint vs LangGraph PostgresSaver",
                   eng, {"payload": f"{len(payload.values)} values, "
                         f"{payload.json_bytes():,} bytes as JSON, seed fixed",
                         "peer": "LangGraph PostgresSaver.from_conn_string, same database"
                         if saver else "langgraph-checkpoint-postgres not installed: skipped",
                         "iterations": f"save {n_save}/series, restore {n_restore} "
                         "(fewer if the time budget runs out; see n)"})  # fmt: skip
            rows: list[Row | str] = []
            bench_save(eng, saver, n_save, rows)
            bench_restore(eng, saver, n_restore, history, rows)
            bench_storage(eng, n_restore // 5, rows)
            table(rows)
            print("ratio: p50 / p50 of the 'vs' row, timed in the same rounds (below 1: faster).")
            print("ops/s: n / total time. LangGraph rows: from the Redis-backup rounds; it is")
            print("timed again in the PostgreSQL rounds for the ratios there.")
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)


if __name__ == "__main__":
    main()
