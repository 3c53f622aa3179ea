"""Construction and an unreachable Redis: RedisConnectionError quickly, never a hang."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from amber import StoreUnavailable
from amber.engines.embedded import stop_embedded
from amber.persistence import (
    PersistenceManager,
    RedisConnectionError,
    SyncPersistenceManager,
    ValidationError,
)

from ..conftest import Engines
from .conftest import Open, own_client


@pytest.fixture
def refused_url() -> str:
    with socket.socket() as s:  # a port that was free a moment ago: nobody listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def silent_url() -> Iterator[str]:
    with socket.socket() as s:  # accepts connections (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"redis://127.0.0.1:{s.getsockname()[1]}/0"


async def _every_call_fails_fast(pm: PersistenceManager, within: float) -> None:
    calls = [
        lambda: pm.save_session({"session_id": "s", "goal": "g", "status": "planning"}),
        lambda: pm.get_session("s"),
        lambda: pm.save_task({"id": "t", "type": "x"}, session_id="s"),
        lambda: pm.next_task("s"),
        lambda: pm.list_tasks("s"),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(RedisConnectionError) as info:
            await call()
        assert time.monotonic() - started < within
        assert isinstance(info.value, StoreUnavailable)
        assert "Redis did not answer" in str(info.value)


async def test_refused_connection(manager: Open, refused_url: str) -> None:
    async with manager(refused_url, prefix="p", timeout=1) as pm:
        await _every_call_fails_fast(pm, within=1.0)


async def test_reviews_fail_fast_on_an_unreachable_postgresql(
    manager: Open, engines: Engines, prefix: str
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://postgres@127.0.0.1:{port}/amber"
    async with manager(engines.redis_url, prefix=prefix, timeout=1, database_url=url) as pm:
        await pm.save_session({"session_id": "s", "goal": "g", "status": "planning"})
        for call in (lambda: pm.list_reviews(), lambda: pm.get_review("r")):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="PostgreSQL did not answer"):
                await call()
            assert time.monotonic() - started < 3.0


async def test_server_that_never_answers(manager: Open, silent_url: str) -> None:
    async with manager(silent_url, prefix="p", timeout=0.2) as pm:
        started = time.monotonic()
        with pytest.raises(RedisConnectionError):
            await pm.get_session("s")
        assert time.monotonic() - started < 2.0  # one retry at most, each bounded


async def test_a_client_passed_in_is_used_and_left_open(engines: Engines, prefix: str) -> None:
    client = own_client(engines.redis_url, asyncio=True)
    async with PersistenceManager(client=client, prefix=prefix) as pm:
        await pm.save_session({"session_id": "s", "goal": "g", "status": "planning"})
        await pm.save_task({"id": "t", "type": "x"}, session_id="s")
        task = await pm.next_task("s")
        assert task is not None and task.id == "t"
        assert [s.session_id for s in await pm.list_sessions()] == ["s"]
    assert await client.ping() is True
    await client.aclose()


def test_a_sync_client_passed_in_is_used_and_left_open(engines: Engines, prefix: str) -> None:
    client = own_client(engines.redis_url, asyncio=False)
    with SyncPersistenceManager(client=client, prefix=prefix) as pm:
        pm.save_session({"session_id": "s", "goal": "g", "status": "planning"})
        pm.save_task({"id": "t", "type": "x"}, session_id="s")
        assert [t.id for t in pm.list_tasks("s")] == ["t"]
        task = pm.next_task("s")
        assert task is not None and task.id == "t"
        assert [s.session_id for s in pm.list_sessions()] == ["s"]
    assert client.ping() is True
    client.close()


async def test_url_and_prefix_come_from_settings(manager: Open, engines: Engines) -> None:
    async with manager() as pm:  # AMBER_REDIS_URL and AMBER_PREFIX, set by the suite
        assert pm.keys.prefix == engines.prefix
        assert await pm.get_session("nobody") is None


def test_bad_construction_is_refused(engines: Engines) -> None:
    with pytest.raises(ValidationError, match="not both"):
        PersistenceManager(engines.redis_url, client=aioredis.Redis())
    with pytest.raises(ValidationError, match="not both"):
        SyncPersistenceManager(engines.redis_url, client=redis.Redis())
    with pytest.raises(ValidationError, match="task_ttl"):
        SyncPersistenceManager(engines.redis_url, task_ttl=0)


async def test_no_url_starts_the_embedded_redis(
    manager: Open, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AMBER_REDIS_URL", raising=False)
    try:
        async with manager(prefix="embedded-check", data_dir=tmp_path) as pm:
            assert pm.url.startswith("unix://")  # its own server, under data_dir
            await pm.save_session({"session_id": "s", "goal": "g", "status": "planning"})
            assert [s.session_id for s in await pm.list_sessions()] == ["s"]
    finally:
        stop_embedded(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"redis_url": "ftp://nowhere"}, "redis_url"),
        ({"redis_url": "redis://h\x00"}, "redis_url"),
        ({"prefix": "a*"}, "prefix"),
        ({"prefix": "\ud800"}, "prefix"),
        ({"timeout": float("inf")}, "connect_timeout"),
        ({"timeout": "soon"}, "connect_timeout"),
        ({"data_dir": "a\x00b"}, "data_dir"),
        ({"session_ttl": float("inf")}, "session_ttl"),
        ({"session_ttl": float("nan")}, "session_ttl"),
        ({"task_ttl": 10**400}, "task_ttl"),
        ({"task_ttl": "60"}, "task_ttl"),
        ({"task_ttl": True}, "task_ttl"),
    ],
)
def test_bad_arguments_are_validation_errors_naming_them(
    manager: Open, kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        manager(**kwargs)
    assert info.value.field == field  # type: ignore[attr-defined]


async def test_bad_limits_are_validation_errors(
    manager: Open, engines: Engines, prefix: str
) -> None:
    async with manager(engines.redis_url, prefix=prefix) as pm:
        for limit in (-1, 1.5, "5", True, None):
            with pytest.raises(ValidationError, match="limit"):
                await pm.list_sessions(limit)  # type: ignore[arg-type]
            with pytest.raises(ValidationError, match="limit"):
                await pm.list_reviews(limit)  # type: ignore[arg-type]
        assert await pm.list_sessions(10**30) == []
