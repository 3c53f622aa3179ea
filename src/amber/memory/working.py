"""``AgentMemory``: one agent's L1 working memory, with redis-py's method names.

Every write runs as one Lua script that applies the command, records the key in
the agent's index (or drops it when the key became empty), bumps the agent's
mutation sequence and refreshes the active TTL, so the index can never disagree
with the keys it lists. Nothing here uses ``KEYS``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgpack
import redis

from amber import codec
from amber.codec import REDIS_TYPES
from amber.errors import (
    Fenced,
    InvalidValue,
    StoreUnavailable,
    WrongType,
)
from amber.keys import Keys, check_id, check_key, check_utf8
from amber.memory import write_scripts
from amber.memory.batch import BATCH, COMMAND_TYPES, Batch, _zadd_args
from amber.memory.known import KnownWrites, batch_sets
from amber.memory.reading import MemoryReads, Scalar, redis_errors

T = TypeVar("T")

Journal = Callable[[str, str, list[Any]], int | None]
"""Called before each write with (command, key name, arguments); may return the
write's sequence number (the WAL durability mode logs the write and returns its
WAL sequence, which then becomes the agent's sequence)."""


class AgentMemory(MemoryReads):
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
        self.staged: list[list[Any]] = []
        """Writes of deferred batches not applied yet (``batch(defer=True)``), as ops."""
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
        self.staged = []  # made against the incarnation this replaces: never applied

    def fence(self, token: int | None) -> None:
        """Write as the run holding ``token`` from now on: a write is refused
        (``Fenced``) once a run with a higher token took the memory over."""
        self.token = token
        self.staged = []

    def current_epoch(self) -> str | None:
        """The incarnation Redis holds now (None: no memory)."""
        self.flush()
        with redis_errors(self.agent_id):
            raw = self.redis.get(self._epoch)
        return raw.decode() if isinstance(raw, bytes) else None

    def _expected(self) -> str:
        """The scripts' guard argument: the expected epoch ('' unguarded, '-' none yet),
        and the run's token after a newline when fenced."""
        expected = (self.epoch or "-") if self.guarded else ""
        return expected if self.token is None else f"{expected}\n{self.token}"

    def flush(self) -> None:
        """Apply the staged writes of deferred batches now, if there are any. Refused
        (``WrongType``, ``Fenced``, ``MemoryLost``), they are dropped, as a refused batch
        is; when Redis could not be reached they stay staged (sets and deletes: sending
        them again leaves what sending them once does)."""
        if self.staged:
            ops, self.staged = self.staged, []
            try:
                self._apply_batch(ops, None)
            except StoreUnavailable:
                self.restage(ops)
                raise

    def restage(self, ops: list[list[Any]]) -> None:
        """Put staged writes that were taken but not applied back, ahead of any staged
        since (sets and deletes: sending them again leaves what sending them once does)."""
        self.staged = ops + self.staged

    def take_known(self) -> KnownWrites:
        """The writes noted since the last call, and a fresh log for those to come."""
        known, self.known = self.known, self.known.handed_on()
        return known

    def _adopt(self, epoch: Any) -> None:
        if self.guarded and isinstance(epoch, bytes):
            self.epoch = epoch.decode()

    # -- writes -----------------------------------------------------------------------
    def _write(self, command: str, name: str, *args: Any) -> Any:
        values = self._check(command, name, args)
        self.flush()
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

    def batch(self, defer: bool = False) -> Batch:
        """Many writes applied in one round trip, atomically, when the block ends:

        ``with mem.batch() as b: b.set("a", 1); b.rpush("log", "x")``. Each write is
        checked when it is queued; a key of another type refuses the whole batch
        (``WrongType``) and nothing is applied. ``b.results`` holds each write's result
        afterwards. In ``wal`` mode the batch is logged as one entry.

        ``defer``: a batch of string sets and deletes is staged in this object and goes
        to Redis with the agent's next save, in the round trip that writes the save's
        copies and while PostgreSQL commits; or before this object's next read or
        write, which then sees it. It has no results. Any other batch, or any batch in
        ``wal`` mode, is applied when the block ends. See docs/memory.md.
        """
        return Batch(self, defer)

    def batch_call(
        self, ops: list[list[Any]], seq: int | None = None, inline: bool = False
    ) -> tuple[list[Any], ...]:
        """The batch script's call for ``ops``: ([EVALSHA, sha, KEYS count], KEYS, ARGV);
        ``inline``: EVAL with the script's text, which runs where Redis's script cache is
        cold (after a restart or a failover) instead of answering NOSCRIPT."""
        keys = [self._index, self._seq, self._epoch, self._changes,
                *(self.key(op[1]) for op in ops), self._fence]  # fmt: skip
        args = [msgpack.packb(ops, use_bin_type=False), self.ttl_ms,
                "" if seq is None else seq, self._expected()]  # fmt: skip
        if inline:
            return (["EVAL", self._batch_script.script, len(keys)], keys, args)
        return (["EVALSHA", self._batch_script.sha, len(keys)], keys, args)

    def _apply_batch(self, ops: list[list[Any]], seq: int | None) -> list[Any]:
        self.written.update(op[1] for op in ops)
        _, keys, args = self.batch_call(ops, seq)
        with self.known.calling(), redis_errors(self.agent_id):
            results, at, epoch = self._batch_script(keys=keys, args=args)
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
        self.flush()
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
        self.flush()
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def supported(rtype: str) -> bool:
    """Whether amber can snapshot a Redis type."""
    return rtype in REDIS_TYPES


VOID = "VOID"
"""The log's name of a void mark: the logged write at the sequence it names was refused
by Redis (a later run fenced it off) and must never be replayed."""
