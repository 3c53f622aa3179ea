"""The snapshot of an agent's working memory: its canonical form, digests, deltas, and
the meta the Redis secondary keeps beside it. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import orjson

from amber import codec
from amber.codec import Entry, RedisType
from amber.errors import ConsistencyError, MemoryLost
from amber.memory import scripts

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
    def unconfirmed(self) -> bool:
        """Whether a restore wrote this memory and never confirmed it (``apply.py``):
        ``l1_complete`` does not take it as it is, and a checkpoint or
        ``L1CacheSnapshotter.store`` refuses it (:meth:`refuse_unconfirmed`)."""
        return scripts.unconfirmed(self.epoch)

    def refuse_unconfirmed(self, **context: object) -> None:
        """``MemoryLost`` (with ``context``) when :attr:`unconfirmed`: recover it first."""
        if self.unconfirmed:
            raise MemoryLost(
                f"working memory was written by a restore that did not finish, epoch"
                f" {self.epoch}; recover it first",
                agent_id=self.agent_id,
                **context,
            )

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
        """The whole snapshot as PostgreSQL stores it: canonical JSON in a zstd frame
        (compressed unless it is short: ``codec.pack_row``)."""
        return codec.pack_row(self.raw)

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


def merge_changes(
    base: Snapshot,
    names: list[str],
    got: dict[str, Entry],
    seq: int,
    epoch: str | None,
    missing: tuple[str, ...],
    consume: bool,
) -> Snapshot:
    """``base`` with each of ``names`` set to its entry in ``got`` (absent: deleted), as a
    snapshot at ``seq`` relative to ``base``. ``consume`` takes over ``base``'s maps
    instead of copying them (a copy is O(keys)): ``base`` must then never be read again."""
    if consume:
        memory, canon, digests = base.memory, base.canon, base.digests
    else:
        memory, canon, digests = dict(base.memory), dict(base.canon), dict(base.digests)
    total = base.total
    changed: set[str] = set()
    removed: set[str] = set()
    owned = set(base.owned)
    encode, digest = codec.encode_value, codec.key_digest
    for name in names:
        old = digests.pop(name, None)
        if old is not None:
            total -= old
            memory.pop(name)
            canon.pop(name)
        entry = got.get(name)
        owned.discard(name)
        if entry is None:
            if old is not None:
                removed.add(name)
            continue
        if entry.ttl_ms > 0:
            owned.add(name)
        c = (entry.type, encode(entry.type, entry.value), entry.ttl_ms)
        memory[name], canon[name] = entry, c
        digests[name] = digest(name, c[0], c[1])
        total += digests[name]
        changed.add(name)
    return Snapshot(
        base.agent_id, memory, seq, missing, epoch, canon, digests, total,
        base_seq=base.seq, changed=frozenset(changed), removed=frozenset(removed),
        owned=frozenset(owned),
    )  # fmt: skip


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
        raw = self.to_json()
        return codec.seal(self.seq, raw, codec.store(raw))  # a few hundred bytes

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


def elapsed_ms(t0: float) -> float:
    """Milliseconds since ``t0`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - t0) * 1000
