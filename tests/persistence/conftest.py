"""A manager per test, under its own sub-prefix of the run's prefix, in both flavors.

Each test gets ``<run prefix>-<id>`` and, afterwards, deletes the keys under it
(and nothing else), so tests can assert exact listings. Tests that take ``pm`` or
``manager`` run twice: on ``PersistenceManager`` and on ``SyncPersistenceManager``
behind ``Awaited``, so one test body checks both.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import pytest
import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster
import redis.cluster

from amber.engines.connect import open_redis
from amber.persistence import PersistenceManager, SyncPersistenceManager
from amber.redis_url import parse_redis_url

from ..conftest import Engines, delete_prefix, scan_prefix


@pytest.fixture
def prefix(engines: Engines, uid: Callable[[str], str]) -> Iterator[str]:
    name = f"{engines.prefix}-{uid('p')}"
    yield name
    delete_prefix(engines.redis_url, name)


@pytest.fixture
def raw(engines: Engines) -> Iterator[redis.Redis]:
    """A plain client on the suite's Redis (a cluster client on a cluster), to look at what
    was stored."""
    client = open_redis(engines.redis_url, 5.0)
    yield client
    client.close()


class Awaited:
    """A ``SyncPersistenceManager`` whose methods are awaited like ``PersistenceManager``'s."""

    def __init__(self, pm: SyncPersistenceManager) -> None:
        self.pm = pm

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.pm, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call

    async def __aenter__(self) -> Awaited:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.pm.close()


Open = Callable[..., PersistenceManager]
"""Makes a manager of the test's flavor from ``PersistenceManager``'s arguments."""


@pytest.fixture(params=["async", "sync"])
def manager(request: pytest.FixtureRequest) -> Open:
    """``PersistenceManager``, or ``SyncPersistenceManager`` behind ``Awaited``."""
    if request.param == "async":
        return PersistenceManager

    def sync(*args: Any, **kwargs: Any) -> PersistenceManager:
        return cast(PersistenceManager, Awaited(SyncPersistenceManager(*args, **kwargs)))

    return sync


@pytest.fixture
async def pm(manager: Open, engines: Engines, prefix: str) -> AsyncIterator[PersistenceManager]:
    async with manager(engines.redis_url, prefix=prefix) as opened:
        yield opened


DAY_MS = 24 * 3600 * 1000
"""The 24 h TTL of sessions, tasks and default reviews, in ms."""


def session(sid: str, **change: object) -> dict[str, object]:
    """A valid session document (the seed's example), with ``change`` applied."""
    return {
        "session_id": sid,
        "goal": "Research trending AI topics",
        "status": "planning",
        **change,
    }


def task(tid: str, **change: object) -> dict[str, object]:
    """A valid task document (the seed's example), with ``change`` applied."""
    return {
        "id": tid,
        "type": "mcp_call",
        "mcp_tool": "twitter_trends",
        "parameters": {"location": "US"},
        **change,
    }


def keys_under(client: redis.Redis, prefix: str) -> list[bytes]:
    """Every key stored under ``prefix``, on every primary of a cluster (SCAN; tests only)."""
    return scan_prefix(client, prefix)


def expires_at_ms(client: redis.Redis, key: str) -> float:
    """When ``key`` expires, in Unix ms by the clock of the test (PEXPIRETIME needs Redis 7)."""
    return time.time() * 1000 + client.pttl(key)


def own_client(url: str, *, asyncio: bool) -> Any:
    """A client that decodes replies, for ``client=``: a cluster client on a cluster."""
    target = parse_redis_url(url)
    if target.kind != "cluster":
        return (aioredis.Redis if asyncio else redis.Redis).from_url(url, decode_responses=True)
    if asyncio:
        nodes = [aioredis.cluster.ClusterNode(h, p) for h, p in target.nodes]
        return aioredis.RedisCluster(startup_nodes=nodes, decode_responses=True)
    return redis.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in target.nodes],  # type: ignore[no-untyped-call]
        decode_responses=True,
    )
