"""``AgentMemory.batch()``: many writes queued, then applied in one atomic script."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from amber.codec import RedisType
from amber.errors import AmberError, InvalidValue, MemoryLost, fenced
from amber.memory import scripts
from amber.memory.known import batch_sets

if TYPE_CHECKING:
    from amber.memory.reading import Scalar
    from amber.memory.snapshot_model import Snapshot
    from amber.memory.working import AgentMemory

COMMAND_TYPES: dict[str, RedisType] = {
    "SET": "string", "RPUSH": "list", "LPUSH": "list", "HSET": "hash", "HDEL": "hash",
    "SADD": "set", "SREM": "set", "ZADD": "zset", "ZREM": "zset",
}  # fmt: skip
"""The Redis type each write command works on."""

BATCH = "BATCH"
"""The log's name of a batch of writes (``AgentMemory.batch``)."""


def _zadd_args(agent_id: str, name: str, mapping: Mapping[Any, float]) -> list[Scalar]:
    """ZADD's arguments (score, member, ...); a score that is not a number is ``InvalidValue``."""
    args: list[Scalar] = []
    for member, score in mapping.items():
        try:
            value = float(score)
        except (TypeError, ValueError, OverflowError):
            raise InvalidValue(
                f"zset score for key {name!r} is not a number: {score!r}",
                agent_id=agent_id,
                key=name,
            ) from None
        args += [value, member]
    return args


class Batch:
    """Writes queued by ``AgentMemory.batch()``, applied together when the block ends, or
    (``defer``) with the agent's next save."""

    def __init__(self, memory: AgentMemory, defer: bool = False) -> None:
        self.memory = memory
        self.defer = defer
        self.ops: list[list[Any]] = []
        self.results: list[Any] = []

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None and self.ops:
            self.execute()

    def execute(self) -> list[Any]:
        """Apply the queued writes now (logged first in ``wal`` mode); their results. A
        deferred batch of string sets and deletes outside ``wal`` mode is staged instead
        (``AgentMemory.staged``), and has no results."""
        mem, ops = self.memory, self.ops
        self.ops = []
        if self.defer and mem.journal is None and batch_sets(ops) is not None:
            mem.staged += ops
            mem.written.update(op[1] for op in ops)
            self.results = []
            return self.results
        mem.flush()
        seq = mem.journal(BATCH, "", ops) if mem.journal else None
        self.results = mem._logged(seq, lambda: mem._apply_batch(ops, seq))
        return self.results

    def _queue(self, command: str, name: str, *args: Any) -> Batch:
        values = self.memory._check(command, name, args)
        self.ops.append([command, name, COMMAND_TYPES[command], values])
        return self

    def set(self, name: str, value: Scalar) -> Batch:
        """Queue a string SET."""
        return self._queue("SET", name, value)

    def rpush(self, name: str, *values: Scalar) -> Batch:
        """Queue an append to a list."""
        return self._queue("RPUSH", name, *values)

    def lpush(self, name: str, *values: Scalar) -> Batch:
        """Queue a prepend to a list."""
        return self._queue("LPUSH", name, *values)

    def hset(self, name: str, mapping: Mapping[Any, Scalar]) -> Batch:
        """Queue hash field writes."""
        return self._queue("HSET", name, *(x for pair in mapping.items() for x in pair))

    def hdel(self, name: str, *fields: Scalar) -> Batch:
        """Queue hash field deletes."""
        return self._queue("HDEL", name, *fields)

    def sadd(self, name: str, *members: Scalar) -> Batch:
        """Queue set additions."""
        return self._queue("SADD", name, *members)

    def srem(self, name: str, *members: Scalar) -> Batch:
        """Queue set removals."""
        return self._queue("SREM", name, *members)

    def zadd(self, name: str, mapping: Mapping[Any, float]) -> Batch:
        """Queue zset additions with scores."""
        return self._queue("ZADD", name, *_zadd_args(self.memory.agent_id, name, mapping))

    def zrem(self, name: str, *members: Scalar) -> Batch:
        """Queue zset removals."""
        return self._queue("ZREM", name, *members)

    def delete(self, *names: str) -> Batch:
        """Queue key deletes."""
        for name in names:
            self.memory.key(name)
            self.ops.append(["DEL", name, "", []])
        return self


def _string_or_absent(op: list[Any], known: dict[str, bytes | None], snap: Snapshot) -> bool:
    """Whether a staged write leaves its key a string or absent without a type error."""
    if op[0] != "SET" or op[1] in known:
        return True
    entry = snap.memory.get(op[1])
    return entry is None or entry.type == "string"


@dataclass(frozen=True)
class Staged:
    """Deferred writes a save sends with its Redis copies, and what Redis must answer."""

    ops: list[list[Any]]
    seq: int
    """The sequence Redis must give them: the one after the memory's last."""
    epoch: str
    mem: AgentMemory

    @classmethod
    def take(cls, mem: AgentMemory, base: Snapshot | None, sendable: bool) -> Staged | None:
        """The writes deferred to a save (``batch(defer=True)``), taken from ``mem`` to go
        to Redis with the save's copies, when the memory they make is provable without a
        read: ``base`` is the snapshot the save's process stored, the writes noted since
        continue its sequence, no key they set holds another type, and the client can
        send them on a connection of its own (``sendable``). Redis then applies them at
        the next sequence. Otherwise they are applied now, and the save goes on as after
        any write (None)."""
        ops, mem.staged = mem.staged, []
        if not ops:
            return None
        known = mem.known
        if (
            base is not None
            and base.epoch is not None
            and sendable
            and known.enabled
            and known.sound
            and (known.proves(base) if known.count else not base.owned)
            and (not mem.guarded or mem.epoch == base.epoch)
            and all(_string_or_absent(op, known.values, base) for op in ops)
        ):
            return cls(ops, (known.last if known.count else base.seq) + 1, base.epoch, mem)
        mem.staged = ops
        mem.flush()
        return None

    def error(
        self,
        reply: Any,
        seq: int,
        checkpoint_id: str,
        analysis_id: str,
        writer: str | None,
        in_row: bool,
    ) -> AmberError | None:
        """What a save that committed checkpoint ``seq`` raises when Redis answered
        ``reply`` (not applied as planned): None when Redis applied the writes later in
        the same epoch (another object's write came first: nothing lost); ``Fenced`` when
        a later run took the memory over; else ``MemoryLost``: working memory is not the
        checkpoint's, and is recovered from the checkpoint's row when it holds the memory
        (``in_row``), else (``hybrid``) from the Redis copy the save writes after it."""
        if self.overtaken(reply):
            return None
        if isinstance(reply, redis.ResponseError) and str(reply).startswith(scripts.FENCED):
            return fenced(analysis_id, str(writer), "write its deferred memory writes")
        why = self.why(reply)
        message = (
            f"checkpoint {seq} is in PostgreSQL with the writes deferred to it, but Redis"
            f" did not take them ({why}); recover the memory from it"
            if in_row
            else f"checkpoint {seq} is in PostgreSQL and its memory in Redis's copy of it"
            f" alone (this mode keeps memory in Redis), but Redis did not take the writes"
            f" deferred to it ({why}); recover the memory from that copy (if Redis lost it"
            " too, recovering rolls the agent back, and says so)"
        )
        return MemoryLost(
            message,
            agent_id=self.mem.agent_id,
            analysis_id=analysis_id,
            checkpoint_id=checkpoint_id,
        )

    def held_by(self, snap: Snapshot) -> bool:
        """Whether ``snap`` is the memory with these writes applied at their sequence: its
        sequence and epoch theirs, and every key they set or delete as they leave it (a
        snapshot that had to be read from Redis before they were sent is not)."""
        if (snap.seq, snap.epoch) != (self.seq, self.epoch):
            return False
        for name, value in dict(batch_sets(self.ops) or []).items():
            entry = snap.memory.get(name)
            if (entry is None) != (value is None):
                return False
            if entry is not None and (entry.type, entry.value) != ("string", value):
                return False
        return True

    def _sequence(self, reply: Any) -> int | None:
        """The sequence the batch script's reply says Redis applied them at, when it did
        so in the planned incarnation (None: not applied, or in another epoch)."""
        if isinstance(reply, list) and len(reply) == 3 and reply[2] == self.epoch.encode():
            return reply[1] if isinstance(reply[1], int) else None
        return None

    def applied(self, reply: Any) -> bool:
        """Whether the batch script's reply says Redis applied them as planned."""
        return self._sequence(reply) == self.seq

    def overtaken(self, reply: Any) -> bool:
        """Whether Redis applied them in the planned incarnation, but later: another
        object's writes came first. The memory then holds more than the checkpoint, and
        nothing was lost."""
        at = self._sequence(reply)
        return at is not None and at > self.seq

    def again(self, reply: Any) -> Any:
        """``reply``, or when Redis had lost the script, the reply of running it again the
        ordinary way (which loads it)."""
        if not isinstance(reply, redis.exceptions.NoScriptError):
            return reply
        _, keys, args = self.mem.batch_call(self.ops)
        try:
            return self.mem._batch_script(keys=keys, args=args)
        except (redis.RedisError, OSError) as exc:
            return exc

    def why(self, reply: Any) -> str:
        """What went otherwise than planned, in words."""
        if isinstance(reply, BaseException):
            return f"{type(reply).__name__}: {reply}"
        if isinstance(reply, list) and len(reply) == 3:
            return (
                f"it applied them at sequence {reply[1]} of epoch {reply[2]!r},"
                f" not {self.seq} of {self.epoch!r}"
            )
        return f"it answered {reply!r:.80}"
