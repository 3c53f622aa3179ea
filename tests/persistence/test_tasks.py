"""Tasks and task queues against real Redis: save/get, FIFO, TTLs, expired entries dropped."""

from __future__ import annotations

import asyncio

import pytest
import redis

from amber.persistence import (
    PersistenceManager,
    SessionNotFoundError,
    Task,
    ValidationError,
)

from ..conftest import Engines
from .conftest import DAY_MS, Open, expires_at_ms, keys_under, task


@pytest.fixture
async def sid(pm: PersistenceManager) -> str:
    await pm.save_session({"session_id": "sess", "goal": "g", "status": "executing"})
    return "sess"


async def test_save_then_get(pm: PersistenceManager, sid: str) -> None:
    stored = await pm.save_task(task("t1", timeout=30), session_id=sid)
    assert stored.session_id == sid
    got = await pm.get_task("t1")
    assert got == stored and isinstance(got, Task)
    assert (got.mcp_tool, got.parameters, got.timeout) == ("twitter_trends", {"location": "US"}, 30)
    assert await pm.get_task("nothing") is None


async def test_session_may_come_from_the_task(pm: PersistenceManager, sid: str) -> None:
    stored = await pm.save_task(Task(id="t1", type="mcp_call", session_id=sid))
    assert stored.session_id == sid
    assert [t.id for t in await pm.list_tasks(sid)] == ["t1"]


async def test_task_and_queue_ttls_are_24h(
    pm: PersistenceManager, sid: str, raw: redis.Redis
) -> None:
    await pm.save_task(task("t1"), session_id=sid)
    keys = pm.keys
    for key in (keys.tasks(sid), keys.task_expiry(sid), keys.task_queue(sid)):
        assert DAY_MS - 60_000 < raw.pttl(key) <= DAY_MS, key
    lookup = raw.pttl(keys.task_session("t1"))  # outlives the task by a second
    assert DAY_MS - 60_000 < lookup <= DAY_MS + 1000
    score = raw.zscore(keys.task_expiry(sid), "t1")
    assert score is not None and abs(score - expires_at_ms(raw, keys.tasks(sid))) < 60_000


async def test_task_keys_live_as_long_as_the_longest_lived_task(
    engines: Engines, manager: Open, pm: PersistenceManager, sid: str, raw: redis.Redis
) -> None:
    await pm.save_task(task("long"), session_id=sid)
    async with manager(engines.redis_url, prefix=pm.keys.prefix, task_ttl=60) as short:
        await short.save_task(task("short"), session_id=sid)
    assert raw.pttl(pm.keys.tasks(sid)) > 3_600_000  # not shortened by the short task


async def test_queue_is_fifo_and_runs_dry(pm: PersistenceManager, sid: str) -> None:
    for i in range(4):
        await pm.save_task(task(f"t{i}"), session_id=sid)
    assert [t.id for t in await pm.list_tasks(sid)] == ["t0", "t1", "t2", "t3"]
    taken = [await pm.next_task(sid) for _ in range(5)]
    assert [t.id if t else None for t in taken] == ["t0", "t1", "t2", "t3", None]
    assert await pm.get_task("t0") is not None  # readable while a worker runs it
    assert await pm.list_tasks(sid) == []


async def test_saving_a_task_again_updates_it_without_queueing_twice(
    pm: PersistenceManager, sid: str
) -> None:
    await pm.save_task(task("t1"), session_id=sid)
    await pm.save_task(task("t1", parameters={"location": "FR"}), session_id=sid)
    assert [t.parameters for t in await pm.list_tasks(sid)] == [{"location": "FR"}]


async def test_a_task_id_of_another_session_is_refused(pm: PersistenceManager, sid: str) -> None:
    await pm.save_session({"session_id": "other", "goal": "g", "status": "planning"})
    await pm.save_task(task("t1"), session_id=sid)
    with pytest.raises(ValidationError, match="already belongs to session 'sess'") as info:
        await pm.save_task(task("t1"), session_id="other")
    assert info.value.field == "id"  # type: ignore[attr-defined]
    assert await pm.list_tasks("other") == []


async def test_a_missing_session_is_refused_and_nothing_written(
    pm: PersistenceManager, raw: redis.Redis, prefix: str
) -> None:
    with pytest.raises(SessionNotFoundError) as info:
        await pm.save_task(task("t1"), session_id="ghost")
    assert info.value.session_id == "ghost"  # type: ignore[attr-defined]
    with pytest.raises(SessionNotFoundError):
        await pm.next_task("ghost")
    with pytest.raises(SessionNotFoundError):
        await pm.list_tasks("ghost")
    assert keys_under(raw, prefix) == []


async def test_invalid_tasks_name_the_field_and_write_nothing(
    pm: PersistenceManager, sid: str, raw: redis.Redis
) -> None:
    before = sorted(keys_under(raw, pm.keys.prefix))
    cases = [
        (task("t*"), sid, "id"),
        (task("t1", timeout=-5), sid, "timeout"),
        (task("t1", parameters={"when": object()}), sid, "parameters"),
        (task("t1"), None, "session_id"),
        (task("t1", session_id="elsewhere"), sid, "session_id"),
    ]
    for bad, session_id, field in cases:
        with pytest.raises(ValidationError) as info:
            await pm.save_task(bad, session_id=session_id)
        assert info.value.field == field, bad  # type: ignore[attr-defined]
        assert field in str(info.value)
    assert sorted(keys_under(raw, pm.keys.prefix)) == before
    assert await pm.list_tasks(sid) == []


async def test_expired_tasks_are_skipped_and_their_entries_removed(
    engines: Engines, manager: Open, pm: PersistenceManager, sid: str, raw: redis.Redis
) -> None:
    async with manager(engines.redis_url, prefix=pm.keys.prefix, task_ttl=0.05) as short:
        await short.save_task(task("brief1"), session_id=sid)
        await short.save_task(task("brief2"), session_id=sid)
    await pm.save_task(task("lasting"), session_id=sid)  # renews the queue's TTL
    for _ in range(100):  # the short TTL is real: wait until Redis has dropped both
        if await pm.get_task("brief1") is None and await pm.get_task("brief2") is None:
            break
        await asyncio.sleep(0.02)
    queue = pm.keys.task_queue(sid)
    assert raw.llen(queue) == 3
    assert [t.id for t in await pm.list_tasks(sid)] == ["lasting"]
    assert raw.hkeys(pm.keys.tasks(sid)) == [b"lasting"]  # the expired ones were dropped
    assert raw.zrange(pm.keys.task_expiry(sid), 0, -1) == [b"lasting"]
    taken = await pm.next_task(sid)
    assert taken is not None and taken.id == "lasting"
    assert raw.llen(queue) == 0


async def test_a_task_expired_in_its_session_is_none_before_anything_cleans_it(
    engines: Engines, manager: Open, pm: PersistenceManager, sid: str, raw: redis.Redis
) -> None:
    await pm.save_task(task("lasting"), session_id=sid)  # keeps the session's task hash
    async with manager(engines.redis_url, prefix=pm.keys.prefix, task_ttl=0.05) as short:
        await short.save_task(task("brief"), session_id=sid)
    await asyncio.sleep(0.1)
    assert raw.hexists(pm.keys.tasks(sid), "brief")  # still in the hash: nothing trimmed yet
    assert raw.exists(pm.keys.task_session("brief"))  # the lookup outlives the task
    assert await pm.get_task("brief") is None


async def test_a_task_id_another_session_no_longer_holds_can_be_reused(
    pm: PersistenceManager, sid: str, raw: redis.Redis
) -> None:
    await pm.save_session({"session_id": "other", "goal": "g", "status": "planning"})
    await pm.save_task(task("t1"), session_id="other")
    raw.hdel(pm.keys.tasks("other"), "t1")  # as if the session had lost it
    stored = await pm.save_task(task("t1"), session_id=sid)
    assert stored.session_id == sid
    assert raw.get(pm.keys.task_session("t1")) == sid.encode()
    got = await pm.get_task("t1")
    assert got is not None and got.session_id == sid
