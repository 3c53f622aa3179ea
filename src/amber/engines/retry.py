"""Retrying Redis commands through a failover without ever applying one twice.

A command is retried, with backoff and within ``AMBER_REDIS_RETRY_SECONDS``, when

- it certainly did not run: the connection could not be made (the node is down
  or restarting, or the Sentinels name no primary while they fail one over), or
  the server refused it before running it (``CLUSTERDOWN``, ``TRYAGAIN``,
  ``LOADING``, ``READONLY`` from a demoted primary, ``MASTERDOWN``; ``MOVED``/``ASK``
  are followed by the cluster client itself); or
- it may have run but running it again changes nothing: a read (``IDEMPOTENT``) or
  one of amber's scripts that only read or write under a sequence guard
  (``idempotent_scripts``: a second run finds its sequence already stored and
  writes nothing).

Anything else that failed after it was sent (a reset or timeout while waiting
for the reply of a memory write, a ``MULTI``/``EXEC`` pipeline) is not retried:
the caller gets the error, because running it again could apply it twice.
Past the budget the error is ``RetriesExhausted`` naming the node and command,
which amber's callers report as ``StoreUnavailable``.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import redis
from redis import exceptions as rex
from redis.sentinel import MasterNotFoundError

IDEMPOTENT = frozenset(
    {
        "PING", "GET", "MGET", "EXISTS", "TYPE", "TTL", "PTTL", "STRLEN", "HGET", "HGETALL",
        "HKEYS", "HLEN", "HMGET", "LRANGE", "LLEN", "SMEMBERS", "SCARD", "ZRANGE",
        "ZRANGEBYSCORE", "ZSCORE", "ZCARD", "SCAN", "INFO", "DBSIZE", "SCRIPT LOAD",
        "SCRIPT EXISTS", "CLUSTER SLOTS", "CLUSTER NODES", "CLUSTER SHARDS", "COMMAND",
    }
)  # fmt: skip
"""Commands that read only (or load a script by its hash): safe to send again."""

REFUSED = (
    rex.ClusterDownError,
    rex.TryAgainError,
    rex.BusyLoadingError,
    rex.ReadOnlyError,
    rex.MasterDownError,
    rex.SlotNotCoveredError,
)
"""Replies of a server that did not run the command."""

_NOT_SENT = (
    "connecting to",  # redis-py: "Error 111 connecting to h:p." / "Timeout connecting to"
    "Connection refused",
    "previous master is now a slave",  # a Sentinel client's word for a READONLY reply
)
"""How redis-py words a connection error of a command that was never run."""

FIRST_DELAY = 0.05
"""Seconds before the first retry; each next waits twice as long, at most ``MAX_DELAY``."""
MAX_DELAY = 1.0
"""Longest wait between two attempts."""


class RetriesExhausted(rex.ConnectionError):
    """A command kept failing for the whole retry budget; the message names node and command."""


def sha1(script: str) -> str:
    """The hash Redis names ``script`` by (what ``EVALSHA`` sends)."""
    return hashlib.sha1(script.encode()).hexdigest()


IDEMPOTENT_SCRIPTS: set[str] = set()
"""Hashes of the scripts that read only, or write under a sequence guard: sent twice, they
act once. The modules that define such scripts register them (``register_idempotent``),
so this layer imports none of them."""


def register_idempotent(*scripts: str) -> None:
    """Declare Lua ``scripts`` safe to send again after a failure that may have run them."""
    IDEMPOTENT_SCRIPTS.update(sha1(s) for s in scripts)


def idempotent_scripts() -> frozenset[str]:
    """Hashes of the scripts registered as idempotent so far."""
    return frozenset(IDEMPOTENT_SCRIPTS)


def not_run(exc: BaseException) -> bool:
    """Whether a command that failed with ``exc`` certainly did not run: the server
    refused it before running it, or it was never sent."""
    if isinstance(exc, (*REFUSED, MasterNotFoundError)):  # no primary: nothing was sent
        return True
    text = str(exc)
    return isinstance(exc, rex.ConnectionError | rex.TimeoutError) and any(
        words in text for words in _NOT_SENT
    )


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (rex.ConnectionError, rex.TimeoutError, *REFUSED))


class Policy:
    """Which failed commands are sent again, and for how long."""

    def __init__(self, budget: float, scripts: Iterable[str] = ()) -> None:
        self.budget = budget
        self.scripts = frozenset(scripts)
        """Scripts this policy treats as idempotent beyond the registered ones."""
        self.retried: deque[tuple[float, str, str]] = deque(maxlen=10_000)
        """The latest retries: (``time.time()``, command, error), for reports and tests."""

    def idempotent(self, args: tuple[Any, ...]) -> bool:
        """Whether sending ``args`` twice has the effect of sending it once."""
        name = str(args[0]).upper() if args else ""
        if name in ("EVALSHA", "EVALSHA_RO") and len(args) > 1:
            return str(args[1]) in self.scripts or str(args[1]) in IDEMPOTENT_SCRIPTS
        if name in ("SCRIPT", "CLUSTER") and len(args) > 1:
            name = f"{name} {str(args[1]).upper()}"
        return name in IDEMPOTENT

    def call(self, send: Callable[[], Any], args: tuple[Any, ...], node: Callable[[], str]) -> Any:
        """``send()``, again after transient failures the policy allows, within the budget."""
        deadline = time.monotonic() + self.budget
        delay = FIRST_DELAY
        tries = 0
        first = time.monotonic()
        while True:
            try:
                return send()
            except rex.RedisError as exc:
                tries += 1
                if isinstance(exc, RetriesExhausted) or not _transient(exc):
                    raise
                if not (not_run(exc) or self.idempotent(args)):
                    raise
                wait = min(delay, MAX_DELAY) * (0.5 + random.random() / 2)
                if self.budget <= 0 or time.monotonic() + wait > deadline:
                    if self.budget <= 0:
                        raise
                    raise RetriesExhausted(
                        f"Redis {str(args[0]).upper() if args else 'command'} on {node()}"
                        f" failed {tries} time(s) over {time.monotonic() - first:.1f}s"
                        f" (AMBER_REDIS_RETRY_SECONDS={self.budget:g}): {exc}"
                    ) from exc
                self.retried.append((time.time(), str(args[0]) if args else "", repr(exc)))
                time.sleep(wait)
                delay *= 2


class RetryingRedis(redis.Redis):
    """``redis.Redis`` (one server or a Sentinel-managed primary) under a retry ``Policy``."""

    policy: Policy = Policy(0)
    sentinels: list[redis.Redis] | None = None
    """The Sentinel connections that found the primary, closed with the client."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self.policy.call(
            lambda: super(RetryingRedis, self).execute_command(*args, **options),  # type: ignore[no-untyped-call]
            args,
            self._node,
        )

    def close(self) -> None:
        """Close the client's connections (and its Sentinels', if it has them)."""
        super().close()
        for sentinel in self.sentinels or []:
            sentinel.close()

    def _node(self) -> str:
        kw = self.connection_pool.connection_kwargs
        if "path" in kw:
            return str(kw["path"])
        service = getattr(self.connection_pool, "service_name", None)
        where = f"{kw.get('host', '?')}:{kw.get('port', '?')}"
        return f"{service} ({where})" if service else where


class RetryingCluster(redis.RedisCluster):
    """``redis.RedisCluster`` under a retry ``Policy`` (topology refreshed on each failure)."""

    policy: Policy = Policy(0)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self.policy.call(
            lambda: super(RetryingCluster, self).execute_command(*args, **options),  # type: ignore[no-untyped-call]
            args,
            lambda: self._node(args),
        )

    def _node(self, args: tuple[Any, ...]) -> str:
        try:
            if str(args[0]).upper().startswith("EVAL") and int(args[2]) > 0:
                key = args[3]
            elif len(args) > 1:
                key = args[1]
            else:
                return "cluster"
            slot = self.keyslot(key)  # type: ignore[no-untyped-call]
            node = self.nodes_manager.get_node_from_slot(slot)
            return f"{node.name} (slot {slot})"
        except Exception:
            return "cluster"
