"""``PersistenceManager``: sessions and task queues in Redis, and reviews, on asyncio.

Each session and task method runs one of ``amber.persistence.core``'s plans, awaiting
every call it makes on a ``redis.asyncio`` client. The review methods are amber's
reviews in PostgreSQL (``Shell``), run in a worker thread. A write that checks
something first (a version, that a session exists) is one Lua script, so no other
client can act in between.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel

from amber.engines.aio import in_thread
from amber.engines.connect import Flavor
from amber.persistence.calls import AsyncScript, Done, Plan, advance, reachable
from amber.persistence.core import Core
from amber.persistence.shell import Shell

P = ParamSpec("P")
T = TypeVar("T")


def _awaited(
    op: Callable[Concatenate[Core, P], Plan[T]],
) -> Callable[Concatenate[PersistenceManager, P], Coroutine[Any, Any, T]]:
    """``op`` as a coroutine method: its plan run on the manager's client."""

    @functools.wraps(op)
    async def method(self: PersistenceManager, /, *args: P.args, **kwargs: P.kwargs) -> T:
        plan = op(self.core, *args, **kwargs)
        step = advance(plan, None)
        if not self._ready:
            with reachable(self.url):
                # redis-py's asyncio cluster client learns the slots on first use, and
                # commands that race that first use can fail on a half-open connection
                await self.redis.initialize()
            self._ready = True
        while not isinstance(step, Done):
            with reachable(self.url):
                reply = await step.send(self.redis, self._scripts)
            step = advance(plan, reply)
        return step.value

    return method


class PersistenceManager(Shell[aioredis.Redis]):
    """Sessions, tasks and reviews of agents in one Redis, under one key prefix (asyncio).

    Every method is a coroutine, documented on ``amber.persistence.core.Core``;
    ``client`` is an open ``redis.asyncio.Redis``; the other arguments are ``Shell``'s.
    """

    _ready = False
    """Whether the client has been initialized (a cluster client: has learned the slots)."""

    flavor = Flavor(aioredis.Redis, RedisCluster, ClusterNode, Sentinel, Retry, AsyncScript)

    async def close(self) -> None:
        """Close the connection pools (a client passed in is left open)."""
        await asyncio.to_thread(self.reviews.close)
        if self._owns_client:
            await self.redis.aclose()

    async def __aenter__(self) -> PersistenceManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    save_session = _awaited(Core.save_session)
    get_session = _awaited(Core.get_session)
    list_sessions = _awaited(Core.list_sessions)
    delete_session = _awaited(Core.delete_session)

    save_task = _awaited(Core.save_task)
    get_task = _awaited(Core.get_task)
    next_task = _awaited(Core.next_task)
    list_tasks = _awaited(Core.list_tasks)

    save_review = in_thread(Shell._save_review)
    get_review = in_thread(Shell._get_review)
    list_reviews = in_thread(Shell._list_reviews)
    remove_review = in_thread(Shell._remove_review)
    decide = in_thread(Shell._decide)
