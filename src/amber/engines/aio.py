"""One way to offer a blocking operation to asyncio code: run it in a worker thread.

amber writes each operation once, blocking (psycopg's pool, redis-py's client). Its
asyncio doors (``AsyncAmberSaver``, ``AmberStore``'s ``a*`` methods, the
``PersistenceManager``'s reviews) declare each coroutine with :func:`in_thread`, so
the loop never blocks and no operation exists twice. The sessions module's Redis
operations are the exception that proves the rule: they are written once as plans of
Redis calls, which its asyncio shell awaits on ``redis.asyncio`` directly.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def in_thread(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """``method`` as a coroutine method that runs it in a worker thread
    (``asyncio.to_thread``: the caller's context variables go with it). The instance is
    typed ``Any`` so a subclass can declare a base class's coroutine with it."""

    @functools.wraps(method)
    async def run(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    return run
