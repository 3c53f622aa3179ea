"""Point-in-time snapshots of an agent's L1, and the Redis secondary that keeps the latest.

A snapshot is read by one Lua script over keys of one slot, so it is always a
memory that existed at one instant, on a single server and on a cluster alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
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
from amber.keys import Keys, check_id, check_keys, check_uuid
from amber.memory import scripts
from amber.memory.working import redis_errors, supported
from amber.schema import sql

READ_ATTEMPTS = 50
"""Times a snapshot read may start over because other writes came in between."""

READ_CHUNK = 500
"""Keys read per script call, so a big memory never holds Redis for long."""

SNAPSHOTS_REMEMBERED = 1024
"""Agents whose last stored snapshot a snapshotter keeps, to read only what changed next time."""

Sealed = tuple[str, bytes, int, int]
"""(key, sealed value, its sequence, TTL in ms): a checkpoint backup to write."""

CHUNKED_ATTEMPTS = 3
"""Chunked reads tried before one script reads a big memory whole."""

Canon = tuple[RedisType, Any, int]
"""One key in canonical form: (type, JSON-able value, own TTL in ms or -1)."""


@dataclass(frozen=True)
class Snapshot:
    """One agent's L1 as it was at one instant, in canonical form with each key's digest.

    A snapshot read relative to an earlier one (``base_seq``) also says which keys it
    set (``changed``) and which it dropped (``removed``), so storing it costs what
    changed, not the whole memory.
    """

    agent_id: str
    memory: dict[str, Entry]
    seq: int
    missing: tuple[str, ...]
    """Keys the index lists but that had expired; dropped from the index by the read."""
    epoch: str | None = None
    """The incarnation of the memory read (see ``memory/scripts.py``); None: no memory."""
    canon: dict[str, Canon] = field(default_factory=dict, compare=False, repr=False)
    digests: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    total: int = field(default=0, compare=False, repr=False)
    """Sum of ``digests``: the hash, before it is written as hex."""
    base_seq: int | None = field(default=None, compare=False, repr=False)
    """The sequence of the snapshot this one was read against (None: read whole)."""
    changed: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)
    removed: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)
    owned: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)
    """Keys with their own TTL (their expiry is no write: every read looks at them)."""

    def unchanged(self) -> Snapshot:
        """This snapshot as a read relative to itself that found nothing changed: an empty
        delta on it."""
        return dataclasses.replace(
            self, base_seq=self.seq, changed=frozenset(), removed=frozenset()
        )

    @cached_property
    def hash(self) -> str:
        """The memory hash over keys, types and values (not TTLs), format 2."""
        return codec.combine(self.total)

    def hash_in(self, fmt: int) -> str:
        """The memory hash in snapshot format ``fmt`` (1 for documents written before 2)."""
        return self.hash if fmt == codec.FORMAT_VERSION else codec.canonical_hash(self.canon, fmt)

    @property
    def canonical(self) -> codec.Canonical:
        """Every value encoded once, for the hash and the stored document."""
        return self.canon

    @cached_property
    def raw(self) -> bytes:
        """The whole snapshot document as canonical JSON bytes."""
        doc = codec.canonical_document(self.canon)
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)

    def pack(self) -> bytes:
        """The whole snapshot as PostgreSQL stores it: zstd canonical JSON."""
        return codec.pack(self.raw)

    def delta_raw(self, base_row: int) -> bytes:
        """What changed since the base, as a document applied on checkpoint row ``base_row``."""
        doc = {
            "format": codec.FORMAT_VERSION,
            "base": base_row,
            "set": {n: _item(self.canon[n]) for n in sorted(self.changed)},
            "del": sorted(self.removed),
        }
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)

    def fields(self, names: Iterable[str]) -> list[bytes]:
        """Secondary hash fields and values, flat: name, ``[type, value, ttl]`` JSON, ..."""
        out: list[bytes] = []
        for n in names:
            out += [n.encode(), orjson.dumps(list(self.canon[n]))]
        return out

    @property
    def indexed(self) -> bool:
        """Whether the agent had an index or sequence at all (False: no L1 exists)."""
        return self.seq > 0 or bool(self.memory) or bool(self.missing)


def _item(canon: Canon) -> dict[str, Any]:
    return {"type": canon[0], "value": canon[1], "ttl_ms": canon[2]}


def make_snapshot(
    agent_id: str,
    memory: dict[str, Entry],
    seq: int,
    missing: tuple[str, ...] = (),
    epoch: str | None = None,
) -> Snapshot:
    """A snapshot of ``memory``, every key encoded and digested (a whole read)."""
    canon: dict[str, Canon] = {}
    digests: dict[str, int] = {}
    owned: list[str] = []
    _canonize(memory, canon, digests, owned)
    return Snapshot(
        agent_id,
        memory,
        seq,
        missing,
        epoch,
        canon,
        digests,
        sum(digests.values()),
        owned=frozenset(owned),
    )


def _canonize(
    memory: dict[str, Entry], canon: dict[str, Canon], digests: dict[str, int], owned: list[str]
) -> None:
    """Add each key of ``memory`` to ``canon`` encoded, to ``digests`` digested, and to
    ``owned`` if it has a TTL of its own: one pass, for thousands of keys."""
    encode, digest = codec.encode_value, codec.key_digest
    for n, e in memory.items():
        t, ttl = e.type, e.ttl_ms
        v = encode(t, e.value)
        canon[n] = (t, v, ttl)
        digests[n] = digest(n, t, v)
        if ttl > 0:
            owned.append(n)


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
        return orjson.dumps(
            {
                "agent_id": self.agent_id,
                "timestamp": self.timestamp,
                "hash": self.hash,
                "checkpoint_id": self.checkpoint_id,
                "key_count": self.key_count,
                "seq": self.seq,
                "epoch": self.epoch,
            }
        )

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


class _Reader:
    """Runs ``scripts.READ`` over some of one agent's keys and decodes what comes back."""

    def __init__(self, client: redis.Redis, keys: Keys, agent_id: str) -> None:
        self.client, self.agent_id = client, agent_id
        self.index_key, self.seq_key = keys.l1_index(agent_id), keys.l1_seq(agent_id)
        self.epoch_key = keys.l1_epoch(agent_id)
        self.base = keys.l1_base(agent_id)  # names were checked when written
        self.script = client.register_script(scripts.READ)

    def read(self, names: list[str], total: int | None, seq: int | None) -> list[Any] | None:
        """Reply items {seq, epoch, entry, type, value, ttl, ...}, or None to start over."""
        reply = self.script(
            keys=[self.index_key, self.seq_key, self.epoch_key, *(self.base + n for n in names)],
            args=[*names, "" if total is None else total, "" if seq is None else seq],
        )
        return _unpack(reply)

    def read_whole(self, chunks: list[list[str]]) -> Snapshot | None:
        """The snapshot of every name the index listed, read in ``chunks`` (one script
        each), or None to start over: the index changed, or chunks saw different
        sequences (every write bumps it, so chunks that agree were read at one instant).

        Each chunk is sent before the one before it is decoded, so Redis reads one while
        Python decodes the other (see :meth:`_replies`).
        """
        total = sum(len(c) for c in chunks)
        memory: dict[str, Entry] = {}
        canon: dict[str, Canon] = {}
        digests: dict[str, int] = {}
        owned: list[str] = []
        missing: list[str] = []
        at: tuple[int, str | None] | None = None
        replies = self._replies(chunks, total)
        try:
            for names, items in zip(chunks, replies, strict=True):
                if items is None:
                    return None
                got = self.decode(names, items)
                if at is None:
                    at = (got.seq, got.epoch)
                elif (got.seq, got.epoch) != at:
                    return None
                memory.update(got.memory)
                missing += got.missing
                _canonize(got.memory, canon, digests, owned)
        finally:
            replies.close()
        assert at is not None  # there is always one chunk, if empty
        total_digest = sum(digests.values())
        return Snapshot(
            self.agent_id,
            memory,
            at[0],
            tuple(missing),
            at[1],
            canon,
            digests,
            total_digest,
            owned=frozenset(owned),
        )

    def _replies(
        self, chunks: list[list[str]], total: int
    ) -> Generator[list[Any] | None, None, None]:
        """Each chunk's reply items (None: start over). The first chunk is read as usual
        (loading the script if Redis lacks it); the others go on one connection of their
        own, each sent before the reply before it is handed over. A lost connection
        starts the read over; a cluster client reads one chunk after another."""
        first = self.read(chunks[0], total, None)
        rest = chunks[1:]
        pool: redis.ConnectionPool | None = getattr(self.client, "connection_pool", None)
        conn = None
        if pool is not None and rest and first is not None:
            with contextlib.suppress(*_LOST):
                conn = pool.get_connection()
        if pool is None or conn is None:  # through the retrying client, one by one
            yield first
            for names in rest:
                yield self.read(names, total, None)
            return
        head = [self.index_key, self.seq_key, self.epoch_key]
        sent = answered = 0

        def send() -> None:
            nonlocal sent
            n = rest[sent]
            args = [*head, *(self.base + x for x in n), *n, total, ""]
            conn.send_command("EVALSHA", self.script.sha, 3 + len(n), *args)  # type: ignore[no-untyped-call]
            sent += 1

        try:
            try:
                send()
            except _LOST:
                conn.disconnect()  # type: ignore[no-untyped-call]
                yield None  # start over: the next attempt reads through the retrying client
                return
            yield first
            while answered < len(rest):
                try:
                    if sent < len(rest):
                        send()
                    reply = conn.read_response()
                except redis.exceptions.NoScriptError:
                    reply = None  # flushed meanwhile: the next attempt loads it again
                except _LOST:
                    conn.disconnect()  # type: ignore[no-untyped-call]
                    sent = answered  # nothing more can come on it
                    yield None  # as above (a failover, a restart): retried, not raised
                    return
                answered += 1
                yield _unpack(reply)
        finally:
            if sent > answered:  # replies still due on it: it cannot serve anyone else
                conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)

    def decode(self, names: list[str], items: list[Any]) -> _Decoded:
        """Each name's entry and value; expired and vanished names; index repairs made."""
        out = _Decoded(_sequence(items[0], self.agent_id), _text(items[1]))
        retyped: dict[str, str] = {}
        memory = out.memory
        for i, name in enumerate(names):
            at = 2 + 4 * i
            raw_entry, actual, value, own_ttl = items[at : at + 4]
            if actual == b"string" and own_ttl == -1 and raw_entry[:7] == b"string:":
                memory[name] = Entry("string", value)  # most keys: read as indexed
                continue
            actual = actual.decode()
            if raw_entry in (None, False):  # the index no longer names it: deleted
                out.gone.append(name)
                continue
            entry = raw_entry.decode()
            if actual == "none":
                if not entry.endswith(":own"):  # an own TTL ran out: meant, not lost
                    out.missing.append(name)
                out.expired.append(name)
                continue
            if not supported(actual):
                raise UnsupportedType(
                    f"key {name!r} holds a {actual}, which amber cannot snapshot",
                    agent_id=self.agent_id,
                    key=name,
                )
            rtype = cast(RedisType, actual)
            ttl = int(own_ttl) if isinstance(own_ttl, int) and own_ttl > 0 else codec.NO_TTL
            out.memory[name] = Entry(rtype, _decode_reply(rtype, value), ttl)
            indexed_type, _, stamp = entry.partition(":")
            if actual != indexed_type:
                retyped[name] = f"{actual}:{stamp}"
        if retyped:  # another client changed a key's type: the index follows
            self.client.hset(self.index_key, mapping=cast(dict[Any, Any], retyped))
        if out.expired:
            self.client.hdel(self.index_key, *out.expired)
        return out


@dataclass
class _Decoded:
    seq: int
    epoch: str | None
    memory: dict[str, Entry] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)


_LOST = (redis.ConnectionError, redis.TimeoutError, OSError)
"""A connection that failed under a read: the read starts over."""


def _unpack(reply: Any) -> list[Any] | None:
    """A READ script's items, or None for its request to start over."""
    return cast(list[Any], msgpack.unpackb(reply, raw=True)) if isinstance(reply, bytes) else None


def _seq20(seq: int) -> str:
    return codec.seal_seq(seq).decode()


def _text(raw: Any) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else None


def read_memory(
    client: redis.Redis, keys: Keys, agent_id: str, guess_empty: bool = False
) -> Snapshot:
    """Read every key of an agent's L1 at one instant. Drops expired keys from the index.

    Lua scripts read the keys the index lists (declared in ``KEYS[]``, one slot), up
    to ``READ_CHUNK`` keys per call; the read starts over if keys were added or removed
    meanwhile, or if any write came between two calls (if writers keep interfering, one
    script reads everything). Raises ``UnsupportedType`` naming a key that another
    client turned into a type amber cannot snapshot.

    ``guess_empty``: the caller expects no keys, so the script is asked first whether
    the index is empty (one round trip instead of two); a wrong guess costs one more.
    """
    agent_id = check_id(agent_id, "agent_id")
    reader = _Reader(client, keys, agent_id)
    with redis_errors(agent_id):
        if guess_empty:
            snap = reader.read_whole([[]])  # the script checks the index has 0 names
            if snap is not None:
                return snap
        for attempt in range(READ_ATTEMPTS):
            names = _names(cast(list[bytes], client.hkeys(reader.index_key)), agent_id)
            step = READ_CHUNK if attempt < CHUNKED_ATTEMPTS else max(len(names), 1)
            chunks = [names[i : i + step] for i in range(0, len(names), step)] or [[]]
            snap = reader.read_whole(chunks)
            if snap is not None:
                return snap
        raise ConsistencyError("L1 keys kept changing during the snapshot", agent_id=agent_id)


def read_changes(
    client: redis.Redis,
    keys: Keys,
    base: Snapshot,
    hint: Iterable[str] = (),
    consume: bool = False,
) -> Snapshot | None:
    """The agent's L1 now, reading only the keys written or deleted since ``base``.

    The write path records every changed name in the agent's changes set, so this
    costs what changed, not the memory's size. ``hint`` names keys the caller expects
    changed (those its own memory object wrote): they are read in the same round trip
    as the changes set; any other changed key costs a second one. None when ``base``
    is no longer a sound starting point (another incarnation, or a secondary that is
    not ``base``): the caller reads the whole memory. Keys with their own TTL are read
    every time, since their expiry is no write.

    ``consume`` lets the new snapshot take over ``base``'s maps instead of copying
    them (a copy is O(keys)): ``base`` must then never be read again, whatever this
    returns or raises.
    """
    agent_id = base.agent_id
    reader = _Reader(client, keys, agent_id)
    script = client.register_script(scripts.READ_CHANGES)
    expected = sorted(set(hint) | base.owned)
    head = [reader.index_key, reader.seq_key, reader.epoch_key, keys.l1_changes(agent_id)]
    head.append(keys.l1_snapshot_meta(agent_id))
    with redis_errors(agent_id):
        for _ in range(READ_ATTEMPTS):
            reply = script(
                keys=[*head, *(reader.base + n for n in expected)], args=[*expected, base.seq]
            )
            items = cast(list[Any], msgpack.unpackb(reply, raw=True))
            seq_raw, epoch_raw, meta_seq, changed_raw = items[:4]
            if _text(epoch_raw) != base.epoch or _text(meta_seq) != _seq20(base.seq):
                return None  # another incarnation, or a secondary that is not the base
            seq = _sequence(seq_raw, agent_id)
            touched = {n.decode() for n in changed_raw} | base.owned
            names, got_items = list(expected), [seq_raw, epoch_raw, *items[4:]]
            extra = sorted(touched - set(expected))
            if extra:  # changed by a writer other than the caller's memory object
                more = reader.read(extra, None, seq)
                if more is None:
                    continue
                names += extra
                got_items += more[2:]
            break
        else:
            raise ConsistencyError("L1 keys kept changing during the snapshot", agent_id=agent_id)
        got = reader.decode(names, got_items)
    if not touched and seq == base.seq:  # nothing changed: an empty delta
        return base.unchanged()
    names = sorted(touched)
    if got.epoch != base.epoch:
        return None
    if consume:
        memory, canon, digests = base.memory, base.canon, base.digests
    else:
        memory, canon, digests = dict(base.memory), dict(base.canon), dict(base.digests)
    total = base.total
    changed: set[str] = set()
    removed: set[str] = set()
    owned = set(base.owned)
    for name in names:
        old = digests.pop(name, None)
        if old is not None:
            total -= old
            memory.pop(name)
            canon.pop(name)
        entry = got.memory.get(name)
        owned.discard(name)
        if entry is None:
            if old is not None:
                removed.add(name)
            continue
        if entry.ttl_ms > 0:
            owned.add(name)
        c = (entry.type, codec.encode_value(entry.type, entry.value), entry.ttl_ms)
        memory[name], canon[name] = entry, c
        digests[name] = codec.key_digest(name, c[0], c[1])
        total += digests[name]
        changed.add(name)
    return Snapshot(
        agent_id,
        memory,
        got.seq,
        tuple(got.missing),
        got.epoch,
        canon,
        digests,
        total,
        base.seq,
        frozenset(changed),
        frozenset(removed),
        frozenset(owned),
    )


def _names(raw: list[bytes], agent_id: str) -> list[str]:
    """Key names from the index; a name amber could not have written is a ``ConsistencyError``."""
    try:
        names = sorted(check_keys([k.decode() for k in raw]))
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


@dataclass(frozen=True)
class Stored:
    """The last snapshot of an agent this process stored, and where."""

    snap: Snapshot
    pg_row: int | None = None
    """The checkpoint sequence of the PostgreSQL row holding it (None: not in PostgreSQL)."""
    chain: int = 0
    """Deltas stored in PostgreSQL since its last whole snapshot."""
    private: bool = False
    """Whether no caller outside the snapshotter holds ``snap``: the next snapshot may then
    take over its maps (see :meth:`L1CacheSnapshotter.advance`)."""


MAX_CHAIN = 32
"""Deltas after which a PostgreSQL snapshot is stored whole again (restore reads the chain)."""


class L1CacheSnapshotter:
    """Snapshots an agent's L1 to the Redis secondary and, on request, PostgreSQL."""

    def __init__(
        self, client: redis.Redis, pool: ConnectionPool, keys: Keys, snapshot_ttl: int
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.ttl_ms = snapshot_ttl * 1000
        self._stored: OrderedDict[str, Stored] = OrderedDict()
        self._empty: set[str] = set()
        """Agents whose last whole read found no keys (a guess for the next one only)."""
        self._lock = threading.Lock()
        self._cache_script = client.register_script(scripts.CACHE)

    def take(
        self,
        agent_id: str,
        full: bool = False,
        hint: Iterable[str] = (),
        guess_empty: bool = False,
    ) -> Snapshot:
        """Read the agent's L1 at one instant, without storing it.

        Relative to the last snapshot this snapshotter stored of the agent, only the
        keys written since are read (O(changes); ``hint`` names those the caller wrote,
        read in the same round trip), unless ``full``: recovery and verification read
        everything, trusting nothing. ``guess_empty``: the caller expects an empty memory
        (a whole read then costs one round trip when it is).
        """
        stored = None if full else self.stored(agent_id)
        if stored is not None:
            snap = read_changes(self.redis, self.keys, stored.snap, hint)
            if snap is not None:
                return snap
        return self._read_whole(agent_id, guess_empty, hint)

    def advance(self, agent_id: str, hint: Iterable[str] = ()) -> Snapshot:
        """The agent's L1 now, as :meth:`take` reads it, for a caller that will pass the
        result to :meth:`remember` with ``private=True`` and hand it to no one else.

        The stored snapshot is forgotten first: when it is private too, the new one
        takes over its maps instead of copying them, so a save of a few changes in a big
        memory costs what changed. If the caller fails before remembering, the next
        snapshot of the agent is read whole.
        """
        with self._lock:
            stored = self._stored.pop(agent_id, None)
        if stored is not None:
            snap = read_changes(self.redis, self.keys, stored.snap, hint, stored.private)
            if snap is not None:
                return snap
        return self._read_whole(agent_id, False, hint)

    def _read_whole(self, agent_id: str, guess_empty: bool, hint: Iterable[str]) -> Snapshot:
        """The whole memory; its last whole read found it empty and the caller wrote
        nothing (``hint``) since: guessed empty (one round trip when it still is)."""
        guess = guess_empty or (agent_id in self._empty and not hint)
        snap = read_memory(self.redis, self.keys, agent_id, guess_empty=guess)
        if snap.memory:
            self._empty.discard(agent_id)
        else:
            if len(self._empty) >= SNAPSHOTS_REMEMBERED:
                self._empty.clear()
            self._empty.add(agent_id)
        return snap

    def stored(self, agent_id: str) -> Stored | None:
        """What this process last stored of the agent, if it remembers."""
        with self._lock:
            return self._stored.get(agent_id)

    def remember(
        self, snap: Snapshot, pg_row: int | None = None, chain: int = 0, private: bool = False
    ) -> None:
        """Note that ``snap`` is now the agent's stored snapshot (the next read's base).

        ``private``: no caller outside the snapshotter holds ``snap`` or shares its maps,
        so the next :meth:`advance` may take them over.
        """
        with self._lock:
            self._stored[snap.agent_id] = Stored(snap, pg_row, chain, private)
            self._stored.move_to_end(snap.agent_id)
            while len(self._stored) > SNAPSHOTS_REMEMBERED:
                self._stored.popitem(last=False)

    def forget(self, agent_id: str) -> None:
        """Drop what is remembered of the agent: its next snapshot is read whole."""
        with self._lock:
            self._stored.pop(agent_id, None)

    def snapshot_on_checkpoint(
        self, agent_id: str, checkpoint_id: object | None = None, dual_write: bool = False
    ) -> SnapshotMeta:
        """Snapshot to the Redis secondary; with ``dual_write`` also into the checkpoint row.

        Returns the meta (``.hash`` is the snapshot's hash). With ``dual_write``,
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

    def cache_call(
        self, snap: Snapshot, meta: SnapshotMeta, backup: Sealed | None, whole: bool = False
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of ``scripts.CACHE`` writing the secondary (a delta when ``snap``
        was read against the stored one) and, with ``backup``, the checkpoint backup."""
        agent_id = snap.agent_id
        k = self.keys
        delta = not whole and snap.base_seq is not None
        sets = sorted(snap.changed) if delta else sorted(snap.canon)
        fields = snap.fields(sets)
        args: list[Any] = [
            backup[1] if backup else "",
            codec.seal_seq(backup[2]) if backup else "",
            backup[3] if backup else 0,
            meta.seal(),
            codec.seal_seq(snap.seq),
            self.ttl_ms,
            codec.seal_seq(cast(int, snap.base_seq)) if delta else "",
            len(sets),
            *fields,
            *(sorted(snap.removed) if delta else []),
        ]
        keys_ = [
            backup[0] if backup else k.checkpoint(agent_id),
            k.l1_snapshot(agent_id),
            k.l1_snapshot_meta(agent_id),
            k.l1_changes(agent_id),
        ]
        return keys_, args

    def write_cache(self, snap: Snapshot, meta: SnapshotMeta, backup: Sealed | None = None) -> None:
        """Write the secondary (and the backup) in one script, never over newer copies; a
        delta the secondary cannot take (it is not the delta's base) goes again whole."""
        with redis_errors(snap.agent_id):
            keys_, args = self.cache_call(snap, meta, backup)
            _, secondary = cast(list[int], self._cache_script(keys=keys_, args=args))
            if secondary == -1:
                keys_, args = self.cache_call(snap, meta, None, whole=True)
                self._cache_script(keys=keys_, args=args)

    def store(
        self, snap: Snapshot, checkpoint_id: object | None = None, dual_write: bool = False
    ) -> SnapshotMeta:
        """Write an already-taken snapshot to the secondary (and, whole, into the
        checkpoint row), and remember it as the agent's stored snapshot."""
        meta = self.meta(snap, checkpoint_id)
        self.write_cache(snap, meta)
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
        self.remember(snap)
        return meta

    def latest_meta(self, agent_id: str) -> SnapshotMeta | None:
        """Meta of the latest snapshot in the Redis secondary, or None."""
        with redis_errors(agent_id):
            raw = self.redis.get(self.keys.l1_snapshot_meta(agent_id))
        return SnapshotMeta.unseal(cast(bytes, raw)) if raw is not None else None


def write_sealed(client: redis.Redis, agent_id: str, items: list[Sealed]) -> int:
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
