"""Point-in-time snapshots of an agent's L1, and the Redis secondary that keeps the latest.

A snapshot is read by one Lua script over keys of one slot, so it is always a
memory that existed at one instant, on a single server and on a cluster alike.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, cast

import msgpack
import orjson
import redis
from psycopg_pool import ConnectionPool

from amber import codec
from amber.codec import Entry, RedisType
from amber.errors import CheckpointNotFound, ConsistencyError, InvalidIdentifier, UnsupportedType
from amber.keys import Keys, check_id, check_key, check_uuid
from amber.memory import scripts
from amber.memory.working import redis_errors, supported
from amber.schema import sql

READ_ATTEMPTS = 50
"""Times a snapshot read may start over because other writes came in between."""

READ_CHUNK = 500
"""Keys read per script call, so a big memory never holds Redis for long."""

SNAPSHOTS_REMEMBERED = 1024
"""Agents whose latest snapshot a snapshotter keeps, to read only what changed next time."""

Sealed = tuple[str, bytes, int, int]
"""(key, sealed value, its sequence, TTL in ms): one value for ``write_sealed``."""

CHUNKED_ATTEMPTS = 3
"""Chunked reads tried before one script reads a big memory whole."""


@dataclass(frozen=True)
class Snapshot:
    """One agent's L1 as it was at one instant."""

    agent_id: str
    memory: dict[str, Entry]
    seq: int
    missing: tuple[str, ...]
    """Keys the index lists but that had expired; dropped from the index by the read."""
    entries: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Each key's index entry when read ('<type>:<seq>:<time>' of its last write)."""
    reused: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)
    """Canonical forms carried over from an earlier snapshot for keys that had not changed."""
    epoch: str | None = None
    """The incarnation of the memory read (see ``memory/scripts.py``); None: no memory."""
    tags: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    """Each key's value tag when read (the tail of its DUMP)."""

    @cached_property
    def canonical(self) -> codec.Canonical:
        """Every value encoded once, for the hash and the stored document."""
        return {
            n: self.reused.get(n) or (e.type, codec.encode_value(e.type, e.value), e.ttl_ms)
            for n, e in self.memory.items()
        }

    @cached_property
    def hash(self) -> str:
        """SHA-256 over keys, types and values (not TTLs)."""
        return codec.canonical_hash(self.canonical)

    @cached_property
    def raw(self) -> bytes:
        """The snapshot document as canonical JSON bytes."""
        doc = codec.canonical_document(self.canonical)
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)

    def pack(self) -> bytes:
        """The form PostgreSQL stores: zstd canonical JSON (``len(raw)`` bytes unpacked)."""
        return codec.pack(self.raw)

    @property
    def indexed(self) -> bool:
        """Whether the agent had an index or sequence at all (False: no L1 exists)."""
        return self.seq > 0 or bool(self.memory) or bool(self.missing)


@dataclass(frozen=True)
class SnapshotMeta:
    """What the Redis secondary keeps beside a snapshot (DD-016's meta)."""

    agent_id: str
    timestamp: str
    hash: str
    checkpoint_id: str | None
    key_count: int
    seq: int
    epoch: str | None = None

    def to_json(self) -> bytes:
        """The meta as JSON bytes."""
        return orjson.dumps(asdict(self))

    def seal(self) -> bytes:
        """The stored form: the JSON sealed with the snapshot's sequence and a checksum."""
        return codec.seal(self.seq, self.to_json())

    @classmethod
    def from_json(cls, raw: bytes) -> SnapshotMeta:
        """Parse meta written by :meth:`to_json`; raises ``ConsistencyError`` if malformed."""
        try:
            doc = orjson.loads(raw)
            meta = cls(**doc)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise ConsistencyError(f"snapshot meta is corrupt: {exc}") from None
        if not isinstance(meta.seq, int) or isinstance(meta.seq, bool) or meta.seq < 0:
            raise ConsistencyError(f"snapshot meta has an invalid sequence {meta.seq!r}")
        return meta

    @classmethod
    def unseal(cls, blob: bytes) -> SnapshotMeta:
        """Inverse of :meth:`seal`, verified; raises ``ConsistencyError`` if damaged."""
        try:
            seq, raw = codec.unseal(blob)
        except codec.CodecError as exc:
            raise ConsistencyError(f"snapshot meta is corrupt: {exc}") from None
        meta = cls.from_json(raw)
        if meta.seq != seq:
            raise ConsistencyError("snapshot meta names another sequence than its header")
        return meta


def _decode_reply(rtype: RedisType, reply: Any) -> codec.Value:
    if rtype == "string":
        return cast(bytes, reply)
    if rtype == "list":
        return list(reply)
    if rtype == "set":
        return set(reply)
    it = iter(reply)
    if rtype == "hash":
        return dict(zip(it, it, strict=True))
    return [(m, float(s)) for m, s in zip(it, it, strict=True)]


def read_memory(
    client: redis.Redis, keys: Keys, agent_id: str, known: Snapshot | None = None
) -> Snapshot:
    """Read every key of an agent's L1 at one instant. Drops expired keys from the index.

    Lua scripts read the keys the index lists (declared in ``KEYS[]``, one slot), up
    to ``READ_CHUNK`` keys per call, every call at the same agent sequence; the read
    starts over if keys were added or removed in between (or, across chunks, if any
    write came). With ``known`` (an earlier snapshot of this agent), keys whose index
    entry is unchanged since then are not read again: every write through
    ``AgentMemory`` changes its key's entry. Raises ``UnsupportedType`` naming a key
    that another client turned into a type amber cannot snapshot.
    """
    agent_id = check_id(agent_id, "agent_id")
    index_key, seq_key = keys.l1_index(agent_id), keys.l1_seq(agent_id)
    epoch_key = keys.l1_epoch(agent_id)
    script = client.register_script(scripts.READ)
    base = keys.l1_base(agent_id)  # names in the index were checked when written
    held = known.entries if known is not None else {}
    held_tags = known.tags if known is not None else {}

    def read(names: list[str], total: int) -> list[Any] | None:
        reply = script(
            keys=[index_key, seq_key, epoch_key, *(base + n for n in names)],
            args=[
                *names,
                *(held.get(n, "") for n in names),
                *(held_tags.get(n, b"") for n in names),
                total,
            ],
        )
        return (
            cast(list[Any], msgpack.unpackb(reply, raw=True)) if isinstance(reply, bytes) else None
        )

    with redis_errors(agent_id):
        for attempt in range(READ_ATTEMPTS):
            names = _names(cast(list[bytes], client.hkeys(index_key)), agent_id)
            # big memories go in chunks, each at the same sequence (every write bumps it),
            # so no single script holds the server long; if writers keep interfering,
            # one script reads everything
            step = READ_CHUNK if attempt < CHUNKED_ATTEMPTS else max(len(names), 1)
            replies: list[Any] = []
            for i in range(0, max(len(names), 1), step):
                part = read(names[i : i + step], len(names))
                if part is None or (replies and part[:2] != replies[:2]):
                    break
                replies.extend(part if not replies else part[2:])
            else:
                break
        else:
            raise ConsistencyError("L1 keys kept changing during the snapshot", agent_id=agent_id)
        seq = _sequence(replies[0], agent_id)
        epoch = replies[1].decode() if isinstance(replies[1], bytes) else None
        memory: dict[str, Entry] = {}
        entries: dict[str, str] = {}
        tags: dict[str, bytes] = {}
        reused: dict[str, tuple[Any, ...]] = {}
        missing: list[str] = []
        expired: list[str] = []
        retyped: dict[str, str] = {}
        for i, name in enumerate(names):
            at = 2 + 5 * i
            entry, actual = (x.decode() for x in replies[at : at + 2])
            value, tag, own_ttl = replies[at + 2 : at + 5]
            if isinstance(tag, bytes):
                tags[name] = tag
            if actual == "same" and known is not None:
                memory[name], entries[name] = known.memory[name], entry
                reused[name] = known.canonical[name]
                continue
            if actual == "none":
                if not entry.endswith(":own"):  # an own TTL ran out: meant, not lost
                    missing.append(name)
                expired.append(name)
                continue
            if not supported(actual):
                raise UnsupportedType(
                    f"key {name!r} holds a {actual}, which amber cannot snapshot",
                    agent_id=agent_id,
                    key=name,
                )
            rtype = cast(RedisType, actual)
            ttl = int(own_ttl) if isinstance(own_ttl, int) and own_ttl > 0 else codec.NO_TTL
            memory[name] = Entry(rtype, _decode_reply(rtype, value), ttl)
            indexed_type, _, stamp = entry.partition(":")
            if actual != indexed_type:
                entry = f"{actual}:{stamp}"
                retyped[name] = entry
            entries[name] = entry
        if retyped:  # another client changed a key's type: the index follows
            client.hset(index_key, mapping=cast(dict[Any, Any], retyped))
        if expired:
            client.hdel(index_key, *expired)
    return Snapshot(agent_id, memory, seq, tuple(missing), entries, reused, epoch, tags)


def _names(raw: list[bytes], agent_id: str) -> list[str]:
    """Key names from the index; a name amber could not have written is a ``ConsistencyError``."""
    try:
        names = sorted(check_key(k.decode()) for k in raw)
    except (UnicodeDecodeError, InvalidIdentifier) as exc:
        raise ConsistencyError(
            f"the agent's index holds a bad key name: {exc}", agent_id=agent_id
        ) from None
    return names


def _sequence(raw: Any, agent_id: str) -> int:
    """The agent's sequence as stored; garbage there is a ``ConsistencyError``, not a crash."""
    if raw in (None, False):
        return 0
    try:
        seq = int(raw)
    except (TypeError, ValueError):
        raise ConsistencyError(
            f"the agent's sequence key holds {raw!r}, not a sequence", agent_id=agent_id
        ) from None
    if not 0 <= seq < 2**63:
        raise ConsistencyError(f"the agent's sequence {seq} is out of range", agent_id=agent_id)
    return seq


def _now() -> str:
    return datetime.now(UTC).isoformat()


class L1CacheSnapshotter:
    """Snapshots an agent's L1 to the Redis secondary and, on request, PostgreSQL."""

    def __init__(
        self, client: redis.Redis, pool: ConnectionPool, keys: Keys, snapshot_ttl: int
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.ttl_ms = snapshot_ttl * 1000
        self._last: OrderedDict[str, Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, agent_id: str, full: bool = False) -> Snapshot:
        """Read the agent's L1 at one instant, without storing it.

        Keys unchanged since this snapshotter's previous snapshot of the agent are
        carried over instead of read again, unless ``full``: recovery and verification
        read everything, trusting nothing.
        """
        known = None if full else self._last.get(agent_id)
        snap = read_memory(self.redis, self.keys, agent_id, known)
        with self._lock:
            self._last[agent_id] = snap
            self._last.move_to_end(agent_id)
            while len(self._last) > SNAPSHOTS_REMEMBERED:
                self._last.popitem(last=False)
        return snap

    def snapshot_on_checkpoint(
        self, agent_id: str, checkpoint_id: object | None = None, dual_write: bool = False
    ) -> SnapshotMeta:
        """Snapshot to the Redis secondary; with ``dual_write`` also into the checkpoint row.

        Returns the meta (``.hash`` is the snapshot's SHA-256). With ``dual_write``,
        raises ``CheckpointNotFound`` if no checkpoint has ``checkpoint_id``.
        """
        snap = self.take(agent_id)
        return self.store(snap, checkpoint_id, dual_write)

    def meta(self, snap: Snapshot, checkpoint_id: object | None = None) -> SnapshotMeta:
        """The meta that goes beside ``snap``."""
        cid = check_uuid(checkpoint_id, "checkpoint_id") if checkpoint_id is not None else None
        return SnapshotMeta(
            snap.agent_id, _now(), snap.hash, cid, len(snap.memory), snap.seq, snap.epoch
        )

    def secondary(self, meta: SnapshotMeta, snap: Snapshot) -> list[Sealed]:
        """The secondary's two values as (key, sealed value, sequence, TTL ms), for
        ``scripts.WRITE_SEALED``: never written over a newer snapshot."""
        return [
            (self.keys.l1_snapshot(meta.agent_id), codec.seal(meta.seq, snap.raw), meta.seq,
             self.ttl_ms),
            (self.keys.l1_snapshot_meta(meta.agent_id), meta.seal(), meta.seq, self.ttl_ms),
        ]  # fmt: skip

    def store(
        self, snap: Snapshot, checkpoint_id: object | None = None, dual_write: bool = False
    ) -> SnapshotMeta:
        """Write an already-taken snapshot to the secondary (and into the checkpoint row)."""
        meta = self.meta(snap, checkpoint_id)
        write_sealed(self.redis, snap.agent_id, self.secondary(meta, snap))
        if dual_write:
            if meta.checkpoint_id is None:
                raise CheckpointNotFound("dual_write needs a checkpoint_id", agent_id=snap.agent_id)
            with self.pg.connection() as conn:
                cur = conn.execute(
                    sql.ATTACH_SNAPSHOT,
                    (
                        snap.pack(),
                        meta.hash,
                        meta.seq,
                        len(snap.raw),
                        meta.epoch,
                        meta.key_count,
                        meta.checkpoint_id,
                    ),
                )
                if cur.rowcount == 0:
                    raise CheckpointNotFound(
                        "no checkpoint with this id",
                        checkpoint_id=meta.checkpoint_id,
                        agent_id=snap.agent_id,
                    )
        return meta

    def latest_meta(self, agent_id: str) -> SnapshotMeta | None:
        """Meta of the latest snapshot in the Redis secondary, or None."""
        with redis_errors(agent_id):
            raw = self.redis.get(self.keys.l1_snapshot_meta(agent_id))
        return SnapshotMeta.unseal(cast(bytes, raw)) if raw is not None else None


def write_sealed(
    client: redis.Redis, agent_id: str, items: list[tuple[str, bytes, int, int]]
) -> int:
    """Store (key, sealed value, sequence, TTL ms) items in one script, each only if its
    key holds no newer sealed value; returns how many were written."""
    args: list[Any] = []
    for _, value, seq, ttl_ms in items:
        args += [value, codec.seal_seq(seq), ttl_ms]
    with redis_errors(agent_id):
        written = client.register_script(scripts.WRITE_SEALED)(
            keys=[key for key, *_ in items], args=args
        )
    return int(cast(int, written))


def elapsed_ms(t0: float) -> float:
    """Milliseconds since ``t0`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - t0) * 1000
