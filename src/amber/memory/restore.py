"""Restoring an agent's L1 from a snapshot, atomically, and verifying the result."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import msgpack
import redis
from psycopg_pool import ConnectionPool

from amber import codec
from amber.codec import CodecError, Entry
from amber.errors import AmberError, ConsistencyError, InvalidIdentifier, StoreUnavailable
from amber.keys import Keys, check_id, check_key, check_uuid
from amber.memory import scripts
from amber.memory.snapshot import Snapshot, SnapshotMeta, elapsed_ms, read_memory
from amber.memory.working import redis_errors
from amber.schema import sql

log = logging.getLogger("amber.memory")

PG_SNAPSHOTS_TRIED = 3
"""Snapshots in PostgreSQL tried, newest first, before a restore gives up."""


@dataclass(frozen=True)
class Loaded:
    """A snapshot as read from one tier, before it is trusted."""

    source: str
    memory: dict[str, Entry]
    hash: str
    """The hash recorded when the snapshot was taken."""
    seq: int
    stored_hash: str | None = None
    """The hash of the document as read back (None: compute it from ``memory``)."""
    epoch: str | None = None
    """The incarnation of the memory the snapshot was taken of."""


@dataclass(frozen=True)
class RestoreReport:
    """What a restore did: which tier served, how many keys, how long it took."""

    source: str
    keys: int
    seq: int
    hash: str
    ms: float
    verified: bool = True
    epoch: str | None = None
    """The new incarnation the restore started."""


class ConsistencyVerifier:
    """Hash and key-count checks around a restore (DD-016 D3)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def check_snapshot(self, agent_id: str, loaded: Loaded) -> None:
        """Before writing: the snapshot must hash to what its meta says."""
        actual = loaded.stored_hash or codec.memory_hash(loaded.memory)
        if actual != loaded.hash:
            raise ConsistencyError(
                f"snapshot from {loaded.source} does not match its hash (corrupted)",
                agent_id=agent_id,
                expected_hash=loaded.hash,
                actual_hash=actual,
            )

    def verify(self, agent_id: str, expected_hash: str, expected_keys: int) -> Snapshot:
        """After writing: L1 must now hold exactly the snapshot (read in full, trusting
        nothing). Returns what was read; raises ``ConsistencyError`` otherwise."""
        snap = read_memory(self.redis, self.keys, agent_id)
        if snap.missing or len(snap.memory) != expected_keys or snap.hash != expected_hash:
            raise ConsistencyError(
                "restored L1 does not match its snapshot",
                agent_id=agent_id,
                expected_hash=expected_hash,
                actual_hash=snap.hash,
                expected_keys=expected_keys,
                actual_keys=len(snap.memory),
            )
        return snap


def _flat(entry: Entry) -> bytes | list[bytes | str]:
    """A value as the RESTORE script takes it (zset scores as Redis parses them)."""
    v = entry.value
    if entry.type == "string":
        return cast(bytes, v)
    if entry.type == "list":
        return cast(list[bytes | str], v)
    if entry.type == "set":
        return list(cast(set[bytes], v))
    if entry.type == "hash":
        return [b for pair in cast(dict[bytes, bytes], v).items() for b in pair]
    return [b for m, score in cast(list[tuple[bytes, float]], v) for b in (repr(score), m)]


def apply_memory(
    client: redis.Redis, keys: Keys, agent_id: str, memory: dict[str, Entry], seq: int, ttl_ms: int
) -> str:
    """Replace the agent's whole L1 with ``memory`` in one Lua script (atomic), as a new
    incarnation; returns its epoch.

    Keys with an own TTL in the snapshot (``ttl_ms`` > 0) get it back, still marked as
    intended; the others get ``ttl_ms``. Stale keys are those the index lists. Keys an
    expired index no longer names cannot be read through amber and expire by their own TTL.
    """
    index_key, seq_key = keys.l1_index(agent_id), keys.l1_seq(agent_id)
    for name, entry in memory.items():
        if entry.type != "string" and not entry.value:
            raise CodecError(f"key {name!r}: an empty {entry.type} cannot exist in Redis")
    names = list(memory)
    payload = msgpack.packb(
        [[memory[n].type, _flat(memory[n]), max(memory[n].ttl_ms, 0)] for n in names],
        use_bin_type=False,
    )
    epoch = f"r{seq}:{uuid.uuid4().hex[:16]}"
    with redis_errors(agent_id):
        stale = _valid_names(cast(list[bytes], client.hkeys(index_key))) - set(names)
        script = client.register_script(scripts.RESTORE)
        script(
            keys=[
                index_key,
                seq_key,
                keys.l1_epoch(agent_id),
                *(keys.l1(agent_id, n) for n in names),
                *(keys.l1(agent_id, n) for n in sorted(stale)),
            ],
            args=[payload, len(names), ttl_ms, seq, epoch, *names],
        )
    return epoch


def _valid_names(raw: list[bytes]) -> set[str]:
    """Index names that are key names amber could have written (garbage is left to expire)."""
    names = set()
    for k in raw:
        try:
            names.add(check_key(k.decode()))
        except (UnicodeDecodeError, InvalidIdentifier):
            log.warning("skipping a bad name in an L1 index: %r", k)
    return names


Loader = Callable[[], Loaded | None]


def _loaded(source: str, raw: bytes, recorded_hash: str, seq: int, epoch: str | None) -> Loaded:
    """Decode a stored snapshot, hashing the document as stored before trusting it."""
    doc = codec.decode_document(raw)
    stored = codec.document_hash(doc)
    return Loaded(source, codec.memory_from_document(doc), recorded_hash, seq, stored, epoch)


def _decode_row(row: tuple[Any, ...]) -> Loaded:
    blob, digest, seq, size, epoch = row
    raw = codec.unpack(blob, size)
    return _loaded("postgresql_checkpoint", raw, str(digest), int(seq or 0), epoch)


class L1CacheRestorer:
    """Restores an agent's L1: Redis secondary first, then the PostgreSQL checkpoint."""

    def __init__(
        self,
        client: redis.Redis,
        pool: ConnectionPool,
        keys: Keys,
        verifier: ConsistencyVerifier,
        active_ttl: int,
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.verifier = verifier
        self.ttl_ms = active_ttl * 1000

    def load_secondary(self, agent_id: str) -> Loaded | None:
        """The snapshot in the Redis secondary, decoded but not yet verified."""
        with redis_errors(agent_id):
            blob, meta_raw = self.redis.mget(
                [self.keys.l1_snapshot(agent_id), self.keys.l1_snapshot_meta(agent_id)]
            )
        if blob is None or meta_raw is None:
            return None
        meta = SnapshotMeta.unseal(cast(bytes, meta_raw))
        seq, raw = codec.unseal(cast(bytes, blob))
        if seq != meta.seq:
            raise ConsistencyError(
                f"secondary snapshot is at sequence {seq}, its meta at {meta.seq}",
                agent_id=agent_id,
            )
        return _loaded("redis_secondary", raw, meta.hash, meta.seq, meta.epoch)

    def load_postgres(self, analysis_id: object, agent_type: str) -> Loaded | None:
        """The newest snapshot stored with a checkpoint in PostgreSQL."""
        rows = self._pg_rows(analysis_id, agent_type, limit=1)
        return _decode_row(rows[0]) if rows else None

    def _pg_rows(self, analysis_id: object, agent_type: str, limit: int) -> list[tuple[Any, ...]]:
        with self.pg.connection() as conn:
            return conn.execute(
                sql.SNAPSHOTS,
                (check_uuid(analysis_id), check_id(agent_type, "agent_type"), limit),
            ).fetchall()

    def restore_loaded(self, agent_id: str, loaded: Loaded) -> RestoreReport:
        """Verify, write atomically, verify again. Raises ``ConsistencyError`` on mismatch."""
        t0 = time.perf_counter()
        self.verifier.check_snapshot(agent_id, loaded)
        epoch = apply_memory(
            self.redis, self.keys, agent_id, loaded.memory, loaded.seq, self.ttl_ms
        )
        self.verifier.verify(agent_id, loaded.hash, len(loaded.memory))
        return RestoreReport(
            loaded.source, len(loaded.memory), loaded.seq, loaded.hash, elapsed_ms(t0), True, epoch
        )

    def _candidates(
        self, agent_id: str, analysis_id: object, agent_type: str
    ) -> Iterator[tuple[str, Loader]]:
        """(source, loader) pairs to try in order: the secondary, then PostgreSQL, newest first."""
        yield "redis_secondary", lambda: self.load_secondary(agent_id)
        for row in self._pg_rows(analysis_id, agent_type, PG_SNAPSHOTS_TRIED):
            yield "postgresql_checkpoint", lambda row=row: _decode_row(row)  # type: ignore[misc]

    def restore_from_snapshot(
        self, agent_id: str, analysis_id: object, agent_type: str
    ) -> RestoreReport | None:
        """Restore the newest snapshot that verifies; None if there is no snapshot at all.

        A tier whose snapshot is corrupt or does not verify is reported (logged) and
        skipped; if every tier fails, raises ``ConsistencyError`` listing them.
        """
        check_id(agent_id, "agent_id")
        failures: list[str] = []
        for source, load in self._candidates(agent_id, analysis_id, agent_type):
            t0 = time.perf_counter()
            try:
                loaded = load()
                if loaded is None:
                    continue
                report = self.restore_loaded(agent_id, loaded)
                return dataclasses.replace(report, ms=elapsed_ms(t0))
            except StoreUnavailable:
                raise
            except AmberError as exc:  # corrupt, unverifiable, or a key of the wrong type
                log.warning("L1 restore of %s from %s failed: %s", agent_id, source, exc)
                failures.append(f"{source}: {exc}")
        if failures:
            raise ConsistencyError(
                "no snapshot could be restored and verified: " + "; ".join(failures),
                agent_id=agent_id,
                analysis_id=str(analysis_id),
            )
        return None
