"""``L1CacheSnapshotter``: takes snapshots of an agent's L1, remembers the last one it
stored (so the next reads only what changed), and keeps the Redis secondary.

The snapshot model is ``memory/snapshot_model.py`` and the reading ``memory/read.py``;
their names stay importable from here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, cast

import redis
from psycopg_pool import ConnectionPool

from amber import codec
from amber.errors import CheckpointNotFound
from amber.keys import Keys, check_uuid
from amber.memory import scripts
from amber.memory.known import KnownWrites
from amber.memory.read import (
    _Decoded,
    _Reader,
    read_changes,
    read_memory,
)
from amber.memory.reading import redis_errors
from amber.memory.snapshot_model import (
    CHUNKED_ATTEMPTS,
    MAX_CHAIN,
    READ_ATTEMPTS,
    READ_CHUNK,
    SNAPSHOTS_REMEMBERED,
    Canon,
    Sealed,
    Snapshot,
    SnapshotMeta,
    Stored,
    _canonize,
    _item,
    elapsed_ms,
    make_snapshot,
)
from amber.schema import sql

__all__ = [
    "CHUNKED_ATTEMPTS",
    "MAX_CHAIN",
    "READ_ATTEMPTS",
    "READ_CHUNK",
    "SNAPSHOTS_REMEMBERED",
    "Canon",
    "L1CacheSnapshotter",
    "Sealed",
    "Snapshot",
    "SnapshotMeta",
    "Stored",
    "_Decoded",
    "_Reader",
    "_canonize",
    "_item",
    "elapsed_ms",
    "make_snapshot",
    "read_changes",
    "read_memory",
    "write_sealed",
]


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

    def advance(
        self, agent_id: str, hint: Iterable[str] = (), known: KnownWrites | None = None
    ) -> Snapshot:
        """The agent's L1 now, as :meth:`take` reads it, for a caller that will pass the
        result to :meth:`remember` with ``private=True`` and hand it to no one else.

        ``known``: the writes the caller's memory object made since the stored snapshot;
        when they provably are the only ones, the snapshot is built from them and Redis
        is not read at all.

        The stored snapshot is forgotten first: when it is private too, the new one
        takes over its maps instead of copying them, so a save of a few changes in a big
        memory costs what changed. If the caller fails before remembering, the next
        snapshot of the agent is read whole.
        """
        with self._lock:
            stored = self._stored.pop(agent_id, None)
        if stored is not None:
            if known is not None and known.proves(stored.snap):
                return known.apply(stored.snap, stored.private)
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
        raises ``CheckpointNotFound`` if no checkpoint has ``checkpoint_id``;
        ``MemoryLost`` for a memory a restore wrote and did not confirm (:meth:`store`).
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
        checkpoint row), and remember it as the agent's stored snapshot. ``MemoryLost``
        for a memory a restore wrote and did not confirm: recover it first."""
        snap.refuse_unconfirmed()
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
