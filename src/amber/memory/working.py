"""``AgentMemory``: one agent's L1 working memory, with redis-py's method names.

Every write runs as one Lua script that applies the command, records the key in
the agent's index (or drops it when the key became empty), bumps the agent's
mutation sequence and refreshes the active TTL, so the index can never disagree
with the keys it lists. Nothing here uses ``KEYS``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

import msgpack
import redis

from amber import codec
from amber.codec import REDIS_TYPES
from amber.errors import (
    ConsistencyError,
    Fenced,
    InvalidValue,
    MemoryLost,
    StoreUnavailable,
    WrongType,
)
from amber.keys import Keys, check_id, check_key, check_utf8
from amber.memory import scripts, write_scripts
from amber.memory.batch import BATCH, COMMAND_TYPES, Batch, _zadd_args
from amber.memory.known import KnownWrites, batch_sets

T = TypeVar("T")

Scalar = bytes | str | int | float
ByteSet = set[bytes]
Journal = Callable[[str, str, list[Any]], int | None]
"""Called before each write with (command, key name, arguments); may return the
write's sequence number (the WAL durability mode logs the write and returns its
WAL sequence, which then becomes the agent's sequence)."""


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


class AgentMemory:
    """An agent's working memory in Redis under ``<prefix>:L1:{agent_id}:working:<key>``.

    Values go in as bytes, str, int or float and come out as bytes, like redis-py
    with ``decode_responses=False``.

    A *guarded* memory (see :meth:`guard`) holds the epoch of the incarnation it was
    recovered as; every read and write then checks it atomically on the server and
    raises ``MemoryLost`` when Redis holds another (or none), instead of answering
    from a memory that silently lost data.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        agent_id: str,
        active_ttl: int,
        journal: Journal | None = None,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.agent_id = check_id(agent_id, "agent_id")
        self.ttl_ms = active_ttl * 1000
        self.journal = journal
        self._index = keys.l1_index(agent_id)
        self._seq = keys.l1_seq(agent_id)
        self._epoch = keys.l1_epoch(agent_id)
        self._changes = keys.l1_changes(agent_id)
        self._fence = keys.l1_fence(agent_id)
        self._base = keys.l1_base(agent_id)
        self.token: int | None = None
        """The fencing token of the run writing this memory (None: unfenced)."""
        self.guarded = False
        self.written: set[str] = set()
        """Key names this object wrote since its agent's last save (a hint: snapshots
        read them in the same round trip as the server's record of changes)."""
        self.epoch: str | None = None
        """The incarnation this memory expects, when guarded (None: none yet)."""
        self.known = KnownWrites(enabled=journal is None)
        """The values this object wrote since its agent's last save (see ``memory/known.py``)."""
        self._read_script = client.register_script(write_scripts.READ_ONE)
        self._write_script = client.register_script(write_scripts.WRITE)
        self._delete_script = client.register_script(write_scripts.DELETE)
        self._expire_script = client.register_script(write_scripts.EXPIRE)
        self._batch_script = client.register_script(write_scripts.BATCH)

    def key(self, name: str) -> str:
        """Full Redis key of ``name`` (``Keys.l1``; the agent's part built once)."""
        return self._base + check_key(name)

    def guard(self, epoch: str | None) -> None:
        """Expect the incarnation ``epoch`` (None: no memory yet) from now on.

        The first write into a memory guarded with None starts an incarnation and
        this object adopts it.
        """
        self.guarded = True
        self.epoch = epoch

    def fence(self, token: int | None) -> None:
        """Write as the run holding ``token`` from now on: a write is refused
        (``Fenced``) once a run with a higher token took the memory over."""
        self.token = token

    def current_epoch(self) -> str | None:
        """The incarnation Redis holds now (None: no memory)."""
        with redis_errors(self.agent_id):
            raw = self.redis.get(self._epoch)
        return raw.decode() if isinstance(raw, bytes) else None

    def _expected(self) -> str:
        """The scripts' guard argument: the expected epoch ('' unguarded, '-' none yet),
        and the run's token after a newline when fenced."""
        expected = (self.epoch or "-") if self.guarded else ""
        return expected if self.token is None else f"{expected}\n{self.token}"

    def take_known(self) -> KnownWrites:
        """The writes noted since the last call, and a fresh log for those to come."""
        known, self.known = self.known, KnownWrites(enabled=self.known.enabled)
        return known

    def _adopt(self, epoch: Any) -> None:
        if self.guarded and isinstance(epoch, bytes):
            self.epoch = epoch.decode()

    # -- writes -----------------------------------------------------------------------
    def _write(self, command: str, name: str, *args: Any) -> Any:
        values = self._check(command, name, args)
        seq = self.journal(command, name, values) if self.journal else None
        return self._logged(seq, lambda: self._apply(command, name, values, seq))

    def _logged(self, seq: int | None, apply: Callable[[], T]) -> T:
        """Apply a write already logged at ``seq``; if a later run fenced it off, log the
        entry void, so no replay ever applies a write Redis refused."""
        try:
            return apply()
        except Fenced:
            if seq is not None and self.journal is not None:
                self.journal(VOID, "", [seq])
            raise

    def _check(self, command: str, name: str, args: tuple[Any, ...]) -> list[bytes]:
        """Refuse a write before anything is logged (a logged write must be replayable);
        the arguments as the bytes Redis stores, one encoding for every write path."""
        self.key(name)
        if not args:
            raise InvalidValue(
                f"{command.lower()} on {name!r} needs at least one value",
                agent_id=self.agent_id,
                key=name,
            )
        for arg in args:  # before anything is logged: a logged write must be replayable
            if isinstance(arg, bool) or not isinstance(arg, bytes | str | int | float):
                raise InvalidValue(
                    f"value for key {name!r} must be bytes, str, int or float, "
                    f"not {type(arg).__name__}",
                    agent_id=self.agent_id,
                    key=name,
                )
            if isinstance(arg, float) and math.isnan(arg):
                raise InvalidValue(
                    f"value for key {name!r} is NaN", agent_id=self.agent_id, key=name
                )
            check_utf8(arg, "value", agent_id=self.agent_id, key=name)
        try:
            return [codec.scalar_bytes(arg) for arg in args]
        except ValueError as exc:  # an int past Python's digit limit for str()
            raise InvalidValue(
                f"value for key {name!r} cannot be stored: {exc}", agent_id=self.agent_id, key=name
            ) from None

    def _key_keys(self, name: str) -> list[str]:
        """KEYS of a script on one L1 key: the key, index, sequence, epoch, changes, fence."""
        return [self.key(name), self._index, self._seq, self._epoch, self._changes, self._fence]

    def _apply(self, command: str, name: str, args: list[Any], seq: int | None) -> Any:
        self.written.add(name)
        with self.known.calling(), redis_errors(self.agent_id, name):
            result, at, epoch = self._write_script(
                keys=self._key_keys(name),
                args=[
                    command,
                    name,
                    COMMAND_TYPES[command],
                    self.ttl_ms,
                    "" if seq is None else seq,
                    self._expected(),
                    *args,
                ],
            )
        self.known.note(at, epoch, [(name, args[0])] if command == "SET" else None)
        self._adopt(epoch)
        return result

    def _delete(self, names: list[str], seq: int | None) -> int:
        self.written.update(names)
        with self.known.calling(), redis_errors(self.agent_id):
            removed, at, epoch = self._delete_script(
                keys=[
                    self._index,
                    self._seq,
                    self._epoch,
                    self._changes,
                    *(self.key(n) for n in names),
                    self._fence,
                ],
                args=[self.ttl_ms, "" if seq is None else seq, self._expected(), "", *names],
            )
        self.known.note(at, epoch, [(n, None) for n in names])
        self._adopt(epoch)
        return int(removed)

    def replay(self, command: str, name: str, args: list[Any], seq: int) -> None:
        """Apply one logged write again at its logged sequence (WAL recovery; not logged).

        A write that met a key of another type failed the same way when first made,
        and is skipped.
        """
        if command == VOID:
            return  # the write it names was refused: the log's replay skips it
        if command == BATCH:
            ops = [[*(_text(x) for x in op[:3]), list(op[3])] for op in args]
            self._apply_batch(ops, seq)
        elif command == "DEL":
            self._delete([name, *args], seq)
        elif command == "EXPIRE":
            self._expire(name, int(args[0]), seq)
        elif command in COMMAND_TYPES:
            with contextlib.suppress(WrongType):
                self._apply(command, name, args, seq)
        else:
            raise InvalidValue(
                f"the log holds an unknown L1 command {command!r}", agent_id=self.agent_id, key=name
            )

    def batch(self) -> Batch:
        """Many writes applied in one round trip, atomically, when the block ends:

        ``with mem.batch() as b: b.set("a", 1); b.rpush("log", "x")``. Each write is
        checked when it is queued; a key of another type refuses the whole batch
        (``WrongType``) and nothing is applied. ``b.results`` holds each write's result
        afterwards. In ``wal`` mode the batch is logged as one entry.
        """
        return Batch(self)

    def _apply_batch(self, ops: list[list[Any]], seq: int | None) -> list[Any]:
        self.written.update(op[1] for op in ops)
        with self.known.calling(), redis_errors(self.agent_id):
            results, at, epoch = self._batch_script(
                keys=[
                    self._index,
                    self._seq,
                    self._epoch,
                    self._changes,
                    *(self.key(op[1]) for op in ops),
                    self._fence,
                ],
                args=[
                    msgpack.packb(ops, use_bin_type=False),
                    self.ttl_ms,
                    "" if seq is None else seq,
                    self._expected(),
                ],
            )
        self.known.note(at, epoch, batch_sets(ops))
        self._adopt(epoch)
        return list(results)

    def set(self, name: str, value: Scalar) -> bool:
        """Set a string key."""
        return bool(self._write("SET", name, value))

    def rpush(self, name: str, *values: Scalar) -> int:
        """Append to a list; returns its new length."""
        return int(self._write("RPUSH", name, *values))

    def lpush(self, name: str, *values: Scalar) -> int:
        """Prepend to a list; returns its new length."""
        return int(self._write("LPUSH", name, *values))

    def hset(
        self,
        name: str,
        key: Scalar | None = None,
        value: Scalar | None = None,
        mapping: Mapping[Any, Scalar] | None = None,
    ) -> int:
        """Set hash fields; returns how many were added."""
        pairs: list[Scalar] = []
        if key is not None:
            if value is None:
                raise InvalidValue(f"hset on {name!r} needs a value", agent_id=self.agent_id)
            pairs += [key, value]
        for k, v in (mapping or {}).items():
            pairs += [k, v]
        return int(self._write("HSET", name, *pairs))

    def hdel(self, name: str, *fields: Scalar) -> int:
        """Delete hash fields; returns how many were removed."""
        return int(self._write("HDEL", name, *fields))

    def sadd(self, name: str, *members: Scalar) -> int:
        """Add set members; returns how many were new."""
        return int(self._write("SADD", name, *members))

    def srem(self, name: str, *members: Scalar) -> int:
        """Remove set members; returns how many were removed."""
        return int(self._write("SREM", name, *members))

    def zadd(self, name: str, mapping: Mapping[Any, float]) -> int:
        """Add zset members with scores; returns how many were new."""
        return int(self._write("ZADD", name, *_zadd_args(self.agent_id, name, mapping)))

    def zrem(self, name: str, *members: Scalar) -> int:
        """Remove zset members; returns how many were removed."""
        return int(self._write("ZREM", name, *members))

    def delete(self, *names: str) -> int:
        """Delete keys; returns how many existed."""
        if not names:
            return 0
        for n in names:
            check_key(n)
        seq = self.journal("DEL", names[0], list(names[1:])) if self.journal else None
        return self._logged(seq, lambda: self._delete(list(names), seq))

    def clear(self) -> int:
        """Delete every key of this agent's working memory."""
        return self.delete(*self.keys_list())

    def expire(self, name: str, seconds: int) -> bool:
        """Give a key its own TTL in seconds (0 or less deletes it); False if it is missing.

        Its expiry is then intended: recovery does not take it for lost memory. The
        next write to the key gives it the active TTL again, and a restore too.
        """
        if seconds <= 0:
            return self.delete(name) == 1
        self.key(name)
        seq = self.journal("EXPIRE", name, [seconds * 1000]) if self.journal else None
        return self._logged(seq, lambda: self._expire(name, seconds * 1000, seq))

    def _expire(self, name: str, ttl_ms: int, seq: int | None) -> bool:
        self.written.add(name)
        self.known.spoil()  # an own TTL: its expiry will be a change no write records
        with redis_errors(self.agent_id, name):
            done, _, epoch = self._expire_script(
                keys=self._key_keys(name),
                args=[name, ttl_ms, self.ttl_ms, "" if seq is None else seq, self._expected()],
            )
        self._adopt(epoch)
        return bool(done)

    # -- reads --------------------------------------------------------------------------
    def _read(self, name: str, command: str, *args: Any) -> Any:
        """Run a read command on one key; guarded, in one script that checks the epoch."""
        key = self.key(name)
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
        with redis_errors(self.agent_id):
            raw = cast(list[bytes], self.redis.hkeys(self._index))
        return sorted(n.decode() for n in raw)

    def sequence(self) -> int:
        """The agent's mutation sequence (0 if it has none)."""
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def supported(rtype: str) -> bool:
    """Whether amber can snapshot a Redis type."""
    return rtype in REDIS_TYPES


VOID = "VOID"
"""The log's name of a void mark: the logged write at the sequence it names was refused
by Redis (a later run fenced it off) and must never be replayed."""
