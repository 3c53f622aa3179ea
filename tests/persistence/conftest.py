"""A PersistenceManager per test, under its own sub-prefix of the run's prefix.

Each test gets ``<run prefix>-<id>`` and, afterwards, deletes the keys under it
(and nothing else), so tests can assert exact listings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import redis

from amber.persistence import PersistenceManager

from ..conftest import Engines, on_cluster


@pytest.fixture(autouse=True)
def _one_server(engines: Engines) -> None:
    if on_cluster(engines.redis_url):
        pytest.skip("the persistence module runs on one server or Sentinel, not Redis Cluster")


@pytest.fixture
def prefix(engines: Engines, uid: Callable[[str], str]) -> Iterator[str]:
    name = f"{engines.prefix}-{uid('p')}"
    yield name
    client = redis.Redis.from_url(engines.redis_url)
    mine = list(client.scan_iter(match=f"{name}:*", count=1000))
    if mine:
        client.delete(*mine)
    client.close()


@pytest.fixture
def raw(engines: Engines) -> Iterator[redis.Redis]:
    """A plain client on the suite's Redis, to look at what was stored."""
    client = redis.Redis.from_url(engines.redis_url)
    yield client
    client.close()


@pytest.fixture
async def pm(engines: Engines, prefix: str) -> AsyncIterator[PersistenceManager]:
    async with PersistenceManager(engines.redis_url, prefix=prefix) as manager:
        yield manager


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
    """Every key stored under ``prefix`` (SCAN; tests only)."""
    return list(client.scan_iter(match=f"{prefix}:*", count=1000))
