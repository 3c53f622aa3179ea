"""The reads of ``AgentMemory`` (``memory/working.py``), and the translation of redis-py's
errors into amber's that every call on working memory goes through.

A guarded memory reads through one script that checks its epoch first; writes
deferred by ``batch(defer=True)`` are applied before any read, so a read sees them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, cast

import redis
from redis.commands.core import Script

from amber.errors import (
    ConsistencyError,
    Fenced,
    InvalidValue,
    MemoryLost,
    StoreUnavailable,
    WrongType,
)
from amber.memory import scripts

Scalar = bytes | str | int | float
ByteSet = set[bytes]


@contextlib.contextmanager
def redis_errors(agent_id: str, name: str | None = None) -> Iterator[None]:
    """Turn redis-py exceptions into amber's, naming the agent and key."""
    try:
        yield
    except redis.ResponseError as exc:
        text = str(exc)
        if text.startswith(scripts.FENCED):
            raise Fenced(
                f"a later run took agent {agent_id}'s working memory over (fence"
                f" {text.split()[1]}): this run's write was refused",
                agent_id=agent_id,
                key=name,
            ) from None
        if text.startswith(scripts.LOST):
            raise MemoryLost(
                "working memory was lost or replaced in Redis since it was recovered"
                f" (epoch now {text.split()[1]!r}); recover it first",
                agent_id=agent_id,
                key=name,
            ) from None
        if "WRONGTYPE" in text:
            raise WrongType(
                f"key {name!r} holds another type ({text.split()[-1].lower()})",
                agent_id=agent_id,
                key=name,
            ) from None
        raise StoreUnavailable(
            f"Redis refused an L1 command: {text}", agent_id=agent_id, key=name
        ) from None
    except redis.DataError as exc:
        raise InvalidValue(
            f"value for key {name!r} cannot be stored: {exc}", agent_id=agent_id, key=name
        ) from None
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise StoreUnavailable(
            f"Redis failed during an L1 operation: {exc}", agent_id=agent_id
        ) from None


class MemoryReads:
    """Read methods with redis-py's names, mixed into ``AgentMemory``."""

    redis: redis.Redis
    agent_id: str
    guarded: bool
    _read_script: Script
    _epoch: str
    _index: str
    _seq: str
    key: Callable[[str], str]
    _expected: Callable[[], str]
    flush: Callable[[], None]

    # -- reads --------------------------------------------------------------------------
    def _read(self, name: str, command: str, *args: Any) -> Any:
        """Run a read command on one key; guarded, in one script that checks the epoch."""
        key = self.key(name)
        self.flush()
        with redis_errors(self.agent_id, name):
            if not self.guarded:
                return self.redis.execute_command(command, key, *args)  # type: ignore[no-untyped-call]
            return self._read_script(
                keys=[self._epoch, key, self._index], args=[self._expected(), command, name, *args]
            )

    def get(self, name: str) -> bytes | None:
        """Value of a string key, or None."""
        return cast(bytes | None, self._read(name, "GET"))

    def exists(self, name: str) -> bool:
        """Whether the key exists."""
        return bool(self._read(name, "EXISTS"))

    def ttl(self, name: str) -> int:
        """Seconds the key has left (-1 none, -2 missing)."""
        return int(self._read(name, "TTL"))

    def type(self, name: str) -> str:
        """Redis type of the key ('none' if missing)."""
        raw = self._read(name, "TYPE")
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def lrange(self, name: str, start: int, end: int) -> list[bytes]:
        """Elements of a list between two indexes, inclusive."""
        return cast(list[bytes], self._read(name, "LRANGE", start, end))

    def llen(self, name: str) -> int:
        """Length of a list."""
        return int(self._read(name, "LLEN"))

    def hget(self, name: str, key: Scalar) -> bytes | None:
        """One hash field, or None."""
        return cast(bytes | None, self._read(name, "HGET", key))

    def hgetall(self, name: str) -> dict[bytes, bytes]:
        """All fields of a hash."""
        flat = self._read(name, "HGETALL")
        if isinstance(flat, dict):
            return cast(dict[bytes, bytes], flat)
        it = iter(cast(list[bytes], flat))
        return dict(zip(it, it, strict=True))

    def smembers(self, name: str) -> ByteSet:
        """All members of a set."""
        return set(cast(list[bytes] | ByteSet, self._read(name, "SMEMBERS")))

    def zrange(
        self, name: str, start: int, end: int, withscores: bool = False
    ) -> list[bytes] | list[tuple[bytes, float]]:
        """Members of a zset by rank, optionally with scores."""
        if not withscores:
            return cast(list[bytes], self._read(name, "ZRANGE", start, end))
        flat = cast(list[Any], self._read(name, "ZRANGE", start, end, "WITHSCORES"))
        if flat and isinstance(flat[0], tuple | list):
            return [(bytes(m), float(s)) for m, s in flat]
        it = iter(flat)
        return [(m, float(s)) for m, s in zip(it, it, strict=True)]

    def keys_list(self) -> list[str]:
        """Names of every key in this memory, from the index (sorted)."""
        self.flush()
        with redis_errors(self.agent_id):
            raw = cast(list[bytes], self.redis.hkeys(self._index))
        return sorted(n.decode() for n in raw)

    def sequence(self) -> int:
        """The agent's mutation sequence (0 if it has none)."""
        self.flush()
        with redis_errors(self.agent_id):
            raw = self.redis.get(self._seq)
        if raw is None:
            return 0
        try:
            return int(cast(bytes, raw))
        except ValueError:
            raise ConsistencyError(
                f"the working-memory sequence holds {cast(bytes, raw)[:40]!r}, not a number:"
                " it was written outside amber; recover the agent's memory",
                agent_id=self.agent_id,
                key=self._seq,
            ) from None
