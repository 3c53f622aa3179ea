"""Many processes update one session with retry-on-conflict: no update is ever lost."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from multiprocessing.synchronize import Barrier

from amber.persistence import PersistenceManager, VersionConflictError

from ..conftest import Engines

PROCESSES = 4
UPDATES = 25


async def _update(
    url: str, prefix: str, sid: str, name: str, wanted: int, ready: Barrier
) -> tuple[int, int]:
    done = conflicts = 0
    async with PersistenceManager(url, prefix=prefix) as pm:
        await pm.get_session(sid)  # connected and warm before the start line
        ready.wait(60)
        while done < wanted:
            session = await pm.get_session(sid)
            assert session is not None
            session.task_queue.append(f"{name}-{done}")
            try:
                await pm.save_session(session)
            except VersionConflictError:
                conflicts += 1
                continue
            done += 1
    return done, conflicts


def _worker(url: str, prefix: str, sid: str, name: str, ready: Barrier, out: mp.Queue) -> None:  # type: ignore[type-arg]
    out.put((name, *asyncio.run(_update(url, prefix, sid, name, UPDATES, ready))))


def test_processes_with_retry_lose_no_update(engines: Engines, prefix: str) -> None:
    async def create() -> None:
        async with PersistenceManager(engines.redis_url, prefix=prefix) as pm:
            await pm.save_session({"session_id": "shared", "goal": "count", "status": "executing"})

    asyncio.run(create())
    ctx = mp.get_context("spawn")
    ready, out = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(engines.redis_url, prefix, "shared", f"w{i}", ready, out))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0

    async def final() -> tuple[int, list[str]]:
        async with PersistenceManager(engines.redis_url, prefix=prefix) as pm:
            session = await pm.get_session("shared")
            assert session is not None
            return session.version, session.task_queue

    version, entries = asyncio.run(final())
    successes = sum(done for _, done, _ in results)
    assert successes == PROCESSES * UPDATES
    assert version == 1 + successes
    assert len(entries) == successes
    assert set(entries) == {f"w{i}-{n}" for i in range(PROCESSES) for n in range(UPDATES)}
    for i in range(PROCESSES):  # each writer's own updates kept their order
        mine = [e for e in entries if e.startswith(f"w{i}-")]
        assert mine == [f"w{i}-{n}" for n in range(UPDATES)]
    print("conflicts retried per process:", sorted((n, c) for n, _, c in results))
