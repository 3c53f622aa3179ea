"""Sessions against real Redis: save/get, TTLs, optimistic concurrency, listing, deletion."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis

from amber import AmberError, InvalidIdentifier, NotFound
from amber.persistence import (
    PersistenceManager,
    Session,
    SessionNotFoundError,
    ValidationError,
    VersionConflictError,
)

from ..conftest import Engines
from .conftest import DAY_MS, Open, expires_at_ms, keys_under, session


async def test_save_then_get_returns_the_next_version(
    pm: PersistenceManager, uid: Callable[[str], str]
) -> None:
    sid = uid("sess")
    stored = await pm.save_session(session(sid, version=1))
    assert stored.version == 2
    got = await pm.get_session(sid)
    assert got == stored and isinstance(got, Session)
    assert got.goal == "Research trending AI topics"


async def test_a_model_is_accepted_too(pm: PersistenceManager, uid: Callable[[str], str]) -> None:
    first = await pm.save_session(Session(session_id=uid("sess"), goal="g", status="planning"))
    first.status = "executing"
    second = await pm.save_session(first)
    assert (first.version, second.version) == (1, 2)
    assert await pm.get_session(first.session_id) == second


async def test_missing_session_is_none(pm: PersistenceManager, uid: Callable[[str], str]) -> None:
    assert await pm.get_session(uid("nobody")) is None


async def test_session_ttl_is_24h_and_renewed(
    pm: PersistenceManager, raw: redis.Redis, uid: Callable[[str], str]
) -> None:
    sid = uid("sess")
    stored = await pm.save_session(session(sid))
    key = pm.keys.session(sid)
    raw.pexpire(key, 1000)
    await pm.save_session(stored)
    assert DAY_MS - 60_000 < raw.pttl(key) <= DAY_MS


async def test_stale_version_conflicts_and_changes_nothing(
    pm: PersistenceManager, uid: Callable[[str], str]
) -> None:
    sid = uid("sess")
    a = await pm.save_session(session(sid))  # stored version 1
    b = a.model_copy()
    a.status = "executing"
    await pm.save_session(a)  # version 1 -> 2
    b.status = "failed"
    with pytest.raises(VersionConflictError) as info:
        await pm.save_session(b)
    err = info.value
    assert (err.expected, err.actual, err.session_id) == (1, 2, sid)  # type: ignore[attr-defined]
    assert "version" in str(err)
    now = await pm.get_session(sid)
    assert now is not None and (now.status, now.version) == ("executing", 2)


async def test_a_newer_version_than_stored_conflicts(
    pm: PersistenceManager, uid: Callable[[str], str]
) -> None:
    sid = uid("sess")
    await pm.save_session(session(sid))
    with pytest.raises(VersionConflictError) as info:
        await pm.save_session(session(sid, version=7))
    assert (info.value.expected, info.value.actual) == (7, 1)  # type: ignore[attr-defined]


async def test_concurrent_creations_let_exactly_one_win(
    pm: PersistenceManager, uid: Callable[[str], str]
) -> None:
    sid = uid("sess")
    results = await asyncio.gather(
        *(pm.save_session(session(sid, goal=f"g{i}")) for i in range(20)), return_exceptions=True
    )
    won = [r for r in results if isinstance(r, Session)]
    assert len(won) == 1
    assert all(isinstance(r, VersionConflictError) for r in results if r not in won), results
    assert await pm.get_session(sid) == won[0]


async def test_invalid_session_names_the_field_and_writes_nothing(
    pm: PersistenceManager, raw: redis.Redis, prefix: str
) -> None:
    for bad, field in [
        (session("a*b"), "session_id"),
        (session("s", goal=""), "goal"),
        (session("s", task_queue=["t:1"]), "task_queue"),
    ]:
        with pytest.raises(ValidationError) as info:
            await pm.save_session(bad)
        assert info.value.field == field  # type: ignore[attr-defined]
    with pytest.raises(InvalidIdentifier, match="session_id"):
        await pm.get_session("a*")
    assert keys_under(raw, prefix) == []


async def test_list_sessions_latest_first(pm: PersistenceManager) -> None:
    assert await pm.list_sessions() == []
    for sid in ("s1", "s2", "s3"):
        await pm.save_session(session(sid))
        await asyncio.sleep(0.002)  # distinct expiry scores
    s1 = await pm.get_session("s1")
    assert s1 is not None
    await pm.save_session(s1)
    assert [s.session_id for s in await pm.list_sessions()] == ["s1", "s3", "s2"]
    assert [s.session_id for s in await pm.list_sessions(limit=2)] == ["s1", "s3"]
    with pytest.raises(ValidationError, match="limit"):
        await pm.list_sessions(limit=-1)


async def test_expired_sessions_leave_the_listing_and_the_index(
    engines: Engines, prefix: str, manager: Open, pm: PersistenceManager, raw: redis.Redis
) -> None:
    async with manager(engines.redis_url, prefix=prefix, session_ttl=0.05) as short:
        await short.save_session(session("brief"))
    await pm.save_session(session("lasting"))
    gone = raw.delete(pm.keys.session("lasting"))  # a document lost with its index entry left
    assert gone == 1
    for _ in range(100):  # the short TTL is real: wait until Redis has dropped the key
        if await pm.get_session("brief") is None:
            break
        await asyncio.sleep(0.02)
    assert await pm.get_session("brief") is None
    assert await pm.list_sessions() == []
    # the expired entry is trimmed; the lost document's entry is skipped until its score
    # passes (it could be a save in flight, whose entry is written before its document)
    assert raw.zrange(pm.keys.session_index(), 0, -1) == [b"lasting"]


async def test_index_scores_only_grow(
    engines: Engines, prefix: str, manager: Open, pm: PersistenceManager, raw: redis.Redis
) -> None:
    stored = await pm.save_session(session("s"))
    index = pm.keys.session_index()
    first = raw.zscore(index, "s")
    async with manager(engines.redis_url, prefix=prefix, session_ttl=60) as short:
        with pytest.raises(VersionConflictError):
            await short.save_session(session("s"))  # fails, and must not shorten the entry
        second = raw.zscore(index, "s")
        assert first is not None and second == first + 1
        await short.save_session(stored)  # a shorter TTL: the entry outlives the document
    third = raw.zscore(index, "s")
    assert third == first + 2
    assert expires_at_ms(raw, pm.keys.session("s")) < third - 3_600_000


async def test_delete_session_takes_its_tasks(
    pm: PersistenceManager, raw: redis.Redis, prefix: str
) -> None:
    await pm.save_session(session("doomed"))
    await pm.save_session(session("other"))
    for i in range(3):
        await pm.save_task({"id": f"t{i}", "type": "mcp_call"}, session_id="doomed")
    await pm.save_task({"id": "keep", "type": "mcp_call"}, session_id="other")
    taken = await pm.next_task("doomed")
    assert taken is not None and taken.id == "t0"
    assert await pm.delete_session("doomed") == 3  # the taken task too
    assert await pm.get_session("doomed") is None
    assert [await pm.get_task(f"t{i}") for i in range(3)] == [None, None, None]
    assert [s.session_id for s in await pm.list_sessions()] == ["other"]
    assert await pm.get_task("keep") is not None
    with pytest.raises(SessionNotFoundError) as info:
        await pm.delete_session("doomed")
    assert isinstance(info.value, NotFound) and info.value.session_id == "doomed"  # type: ignore[attr-defined]
    left = {k.decode() for k in keys_under(raw, prefix)}
    assert not any("doomed" in k for k in left)


async def test_a_document_with_the_version_elsewhere_is_still_checked(
    pm: PersistenceManager, raw: redis.Redis
) -> None:
    doc = b'{"goal":"g","status":"planning","task_queue":[],"session_id":"s","version":4}'
    raw.set(pm.keys.session("s"), doc)  # not written by amber: version is not first
    with pytest.raises(VersionConflictError) as info:
        await pm.save_session(session("s", version=3))
    assert info.value.actual == 4  # type: ignore[attr-defined]
    assert (await pm.save_session(session("s", version=4))).version == 5


async def test_a_key_of_another_type_is_an_amber_error(
    pm: PersistenceManager, raw: redis.Redis
) -> None:
    raw.hset(pm.keys.session("odd"), "f", "v")  # not a session document
    with pytest.raises(AmberError, match="Redis refused the command"):
        await pm.get_session("odd")
    with pytest.raises(AmberError, match="Redis refused the command"):
        await pm.save_session(session("odd"))
