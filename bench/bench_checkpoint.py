"""How a checkpoint's L1 snapshot is stored in PostgreSQL: zstd canonical JSON in BYTEA
(amber) against the JSONB column DD-011 names, the same snapshot both ways (issue 3).

    .venv/bin/python bench/bench_checkpoint.py [--quick]

The snapshot: a 100-key working memory of about 100 KB (40 notes, 25 lists of 100
floats, 25 cached API responses, 10 chat message lists) from a fixed seed. Each row
times an INSERT or a SELECT of the latest row with the encoding or decoding included,
interleaved round by round. Saves and restores against LangGraph are in
``bench/bench_save.py``.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
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
    n = 20 if quick_flag() else 200
    with engines("bench-checkpoint") as eng:
        payload = Payload.make()
        header("bench_checkpoint: the L1 snapshot in PostgreSQL as BYTEA zstd vs JSONB", eng,
               {"payload": f"{len(payload.values)} values, "
                f"{payload.json_bytes():,} bytes as JSON, seed fixed",
                "iterations": f"{n} per op (fewer if the time budget runs out)"})  # fmt: skip
        rows: list[Row | str] = []
        bench_storage(eng, n, rows)
        table(rows)
        print("ratio: p50 / p50 of the 'vs' row, timed in the same rounds (below 1: faster).")


if __name__ == "__main__":
    main()
