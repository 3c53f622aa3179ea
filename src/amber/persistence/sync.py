"""``SyncPersistenceManager``: the same operations as ``PersistenceManager``, blocking.

For code without an event loop (scripts, threads, WSGI apps). Each method runs one
of ``amber.persistence.core``'s plans on a plain ``redis.Redis`` client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from amber.engines.connect import Flavor
from amber.persistence.calls import Done, Plan, Script, advance, reachable
from amber.persistence.core import Core
from amber.persistence.shell import Shell

P = ParamSpec("P")
T = TypeVar("T")


def _blocking(
    op: Callable[Concatenate[Core, P], Plan[T]],
) -> Callable[Concatenate[SyncPersistenceManager, P], T]:
    """``op`` as a method that returns once its plan has run on the manager's client."""

    @functools.wraps(op)
    def method(self: SyncPersistenceManager, /, *args: P.args, **kwargs: P.kwargs) -> T:
        plan = op(self.core, *args, **kwargs)
        step = advance(plan, None)
        with reachable(self.url):
            while not isinstance(step, Done):
                step = advance(plan, step.send(self.redis, self._scripts))
        return step.value

    return method


class SyncPersistenceManager(Shell[redis.Redis]):
    """Sessions, tasks and reviews of agents in one Redis, under one key prefix (blocking).

    Every method returns once Redis has answered, documented on
    ``amber.persistence.core.Core``; ``client`` is an open ``redis.Redis``; the other
    arguments are ``Shell``'s.
    """

    flavor = Flavor(redis.Redis, RedisCluster, ClusterNode, Sentinel, Retry, Script)

    def close(self) -> None:
        """Close the connection pools (a client passed in is left open)."""
        self.reviews.close()
        if self._owns_client:
            self.redis.close()

    def __enter__(self) -> SyncPersistenceManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    save_session = _blocking(Core.save_session)
    get_session = _blocking(Core.get_session)
    list_sessions = _blocking(Core.list_sessions)
    delete_session = _blocking(Core.delete_session)

    save_task = _blocking(Core.save_task)
    get_task = _blocking(Core.get_task)
    next_task = _blocking(Core.next_task)
    list_tasks = _blocking(Core.list_tasks)

    save_review = Shell._save_review
    get_review = Shell._get_review
    list_reviews = Shell._list_reviews
    remove_review = Shell._remove_review
    decide = Shell._decide
