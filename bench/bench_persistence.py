"""save_session / get_session beside a raw SET / GET of the same JSON, in one run.

Command (from the repository root):

    .venv/bin/python bench/bench_persistence.py            # embedded Redis in a temp dir
    AMBER_REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/bench_persistence.py

Options: ``--n`` operations per row (default 3000), ``--tasks`` planned task ids in
the session document (default 20). One coroutine, one operation in flight: the
latency of a round trip (amber's call and the raw one alternate, so load on the
machine hits both alike), and throughput as 1 / mean latency, in operations per second.
The machine (nproc, Python), redis-py and server versions are printed with the
table. Goal: amber's p50 within 1.5x of the raw round trip.

amber's save is one EVALSHA of a Lua script that reads the stored version, checks
it, writes the new document with its TTL and updates the session index (on a Redis
Cluster, two: the index lives in another slot); its get is
a GET plus JSON decoding and pydantic validation. The raw rows are a plain
``SET key json PX ttl`` and ``GET key`` on the same client.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from amber.engines.embedded import ensure_embedded, stop_embedded
from amber.persistence import PersistenceManager, Session
from amber.persistence.models import dump

Stats = tuple[float, float, float]


def stats(samples: list[float]) -> Stats:
    """p50 and p99 latency in microseconds, and operations per second of one loop."""
    q = statistics.quantiles(samples, n=100)
    return q[49] * 1e6, q[98] * 1e6, len(samples) / sum(samples)


async def measure(
    n: int, ours: Callable[[], Awaitable[Any]], raw: Callable[[], Awaitable[Any]]
) -> tuple[Stats, Stats]:
    """Time ``n`` calls of each, interleaved so that load on the machine hits both alike."""
    for _ in range(min(200, n)):  # warm up: connection, script cache, allocator
        await ours()
        await raw()
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        await ours()
        t1 = time.perf_counter()
        await raw()
        t2 = time.perf_counter()
        mine.append(t1 - t0)
        theirs.append(t2 - t1)
    return stats(mine), stats(theirs)


async def run(url: str, n: int, tasks: int) -> None:
    prefix = f"amber-bench-{uuid.uuid4().hex[:8]}"
    async with PersistenceManager(url, prefix=prefix) as pm:
        session = Session(
            session_id="bench_session",
            goal="Research trending AI topics and draft a weekly summary for review",
            status="executing",
            task_queue=[f"task_{i:04d}" for i in range(tasks)],
        )
        state: dict[str, Session] = {"s": await pm.save_session(session)}
        body = dump(state["s"])
        raw_key = f"{prefix}:raw:bench_session"
        r: aioredis.Redis = pm.redis
        ttl = pm.core.session_ttl_ms

        async def amber_save() -> None:
            state["s"] = await pm.save_session(state["s"])

        async def raw_set() -> None:
            await r.set(raw_key, body, px=ttl)

        async def amber_get() -> None:
            await pm.get_session("bench_session")

        async def raw_get() -> None:
            await r.get(raw_key)

        rows = [
            ("save_session", "raw SET", *await measure(n, amber_save, raw_set)),
            ("get_session", "raw GET", *await measure(n, amber_get, raw_get)),
        ]
        info = await r.info("server")
        await r.delete(raw_key)
        await pm.delete_session("bench_session")

    print(
        f"machine: nproc={os.cpu_count()} python={platform.python_version()} "
        f"redis-py={redis.__version__} server=redis {info.get('redis_version')} "
        f"({'external' if os.environ.get('AMBER_REDIS_URL') else 'embedded, unix socket'})"
    )
    print(f"document: {len(body)} bytes of JSON, {n} operations per row, one in flight\n")
    head = f"{'operation':<14}{'p50 µs':>10}{'p99 µs':>10}{'ops/s':>10}{'p50 ratio':>12}"
    print(head)
    print("-" * len(head))
    for ours, theirs, (p50, p99, ops), (rp50, rp99, rops) in rows:
        print(f"{ours:<14}{p50:>10.1f}{p99:>10.1f}{ops:>10.0f}{p50 / rp50:>11.2f}x")
        print(f"{theirs:<14}{rp50:>10.1f}{rp99:>10.1f}{rops:>10.0f}{'1.00':>11}x")
    worst = max(p50 / rp50 for _, _, (p50, _, _), (rp50, _, _) in rows)
    print(f"\ngoal: within 1.5x of the raw round trip -> worst p50 ratio {worst:.2f}x")


def main() -> None:
    """Parse the options, find or start Redis, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--tasks", type=int, default=20)
    args = parser.parse_args()
    url = os.environ.get("AMBER_REDIS_URL")
    if url:
        asyncio.run(run(url, args.n, args.tasks))
        return
    with tempfile.TemporaryDirectory(prefix="amber-bench-") as tmp:
        data_dir = Path(tmp)
        try:
            url = ensure_embedded(data_dir, redis=True, postgres=False)["redis"]
            asyncio.run(run(url, args.n, args.tasks))
        finally:
            stop_embedded(data_dir)


if __name__ == "__main__":
    main()
