"""The round trips an operation asks for, and how a shell answers them.

An operation (``amber.persistence.core``) is a generator: it yields a call (``Get``,
``MGet``, ``Score`` or ``Run``), receives Redis's reply, and finally returns its
result. It does no I/O itself, so ``PersistenceManager`` (redis.asyncio) and
``SyncPersistenceManager`` (redis) share every line of it; each only sends the calls,
awaiting them or not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from redis import exceptions as rex

from amber.errors import AmberError, RedisConnectionError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Get:
    """A ``GET`` of one key."""

    key: str

    def send(self, client: Any, scripts: Mapping[str, Any]) -> Any:
        """Issue it on a sync or asyncio client: the reply, or an awaitable of it."""
        return client.get(self.key)


@dataclass(frozen=True, slots=True)
class MGet:
    """A ``GET`` of several keys, which may lie in different slots: ``MGET`` on one server,
    one ``MGET`` per slot on a cluster."""

    keys: list[str]

    def send(self, client: Any, scripts: Mapping[str, Any]) -> Any:
        """Issue it on a sync or asyncio client: the replies in order, or an awaitable of them."""
        many = getattr(client, "mget_nonatomic", None)  # a cluster client's
        return many(self.keys) if many is not None else client.mget(self.keys)


@dataclass(frozen=True, slots=True)
class Score:
    """A ``ZSCORE`` of one member of a sorted set."""

    key: str
    member: str

    def send(self, client: Any, scripts: Mapping[str, Any]) -> Any:
        """Issue it on a sync or asyncio client: the score (None if absent), or an awaitable."""
        return client.zscore(self.key, self.member)


@dataclass(frozen=True, slots=True)
class Run:
    """A run of the script named ``script`` in ``amber.persistence.scripts.SCRIPTS``."""

    script: str
    keys: list[str]
    args: list[Any]

    def send(self, client: Any, scripts: Mapping[str, Any]) -> Any:
        """Issue it (``EVALSHA``, or ``EVAL`` if the server lost the script): the reply, or an
        awaitable of it."""
        return scripts[self.script](self.keys, self.args)


class Script:
    """One Lua script on a sync client: ``EVALSHA``, and ``EVAL`` (which caches it again) on
    the node that answers ``NOSCRIPT``. Never ``SCRIPT LOAD``, which a cluster client sends
    to every primary."""

    def __init__(self, client: Any, lua: str) -> None:
        self.client = client
        self.lua = lua
        self.sha = hashlib.sha1(lua.encode()).hexdigest()

    def __call__(self, keys: list[str], args: list[Any]) -> Any:
        """The script's reply."""
        try:
            return self.client.evalsha(self.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return self.client.eval(self.lua, len(keys), *keys, *args)


class AsyncScript(Script):
    """``Script`` on an asyncio client."""

    async def __call__(self, keys: list[str], args: list[Any]) -> Any:
        """The script's reply."""
        try:
            return await self.client.evalsha(self.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return await self.client.eval(self.lua, len(keys), *keys, *args)


Call: TypeAlias = Get | MGet | Score | Run
Plan: TypeAlias = Generator[Call, Any, T]
"""An operation: yields calls, receives their replies, returns its result."""


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """An operation's result."""

    value: T


def advance(plan: Plan[T], reply: Any) -> Call | Done[T]:
    """Give ``plan`` the reply to its last call (None to start it): its next call, or its
    result."""
    try:
        return plan.send(reply)
    except StopIteration as stop:
        return Done(stop.value)


_UNSERVED = (rex.ClusterDownError, rex.TryAgainError, rex.SlotNotCoveredError, rex.MasterDownError)
"""Replies of a cluster that cannot serve the key's slot now (a failover under way)."""


@contextmanager
def reachable(url: str) -> Iterator[None]:
    """Turn a refused, dropped or timed-out connection into ``RedisConnectionError``,
    and a command Redis refused (e.g. a key of another type) into ``AmberError``."""
    try:
        yield
    except (rex.ConnectionError, rex.TimeoutError, OSError, *_UNSERVED) as exc:
        raise RedisConnectionError(
            f"Redis did not answer: {type(exc).__name__}: {exc}", url=url
        ) from None
    except (rex.ResponseError, rex.RedisClusterException) as exc:
        raise AmberError(f"Redis refused the command: {exc}", url=url) from None
