"""``AgentCheckpointer``: save at every subtask boundary, restore by the fastest sound tier.

A save writes PostgreSQL first (durable: the commit is fsync'd by the server),
then, in one Redis transaction, the checkpoint backup and the L1 snapshot
secondary. Where the durability mode (or a pause) asks for it, the L1 snapshot
goes into the same PostgreSQL row.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import redis
from psycopg_pool import ConnectionPool

from amber import codec
from amber.checkpoints.model import Checkpoint, decode_doc, now, seal, unseal
from amber.checkpoints.versions import CheckpointMigrations, registry
from amber.config import Durability, Settings
from amber.errors import CheckpointCorrupt, CheckpointNotFound, StoreUnavailable
from amber.keys import Keys, check_id, check_uuid
from amber.memory.journal import L1Journal
from amber.memory.restore import PG_SNAPSHOTS_TRIED
from amber.memory.snapshot import L1CacheSnapshotter, elapsed_ms
from amber.memory.working import redis_errors

log = logging.getLogger("amber.checkpoints")

PG_FALLBACK_ROWS = 3
"""PostgreSQL rows tried, newest first, when the newest fails its checksum."""


class Checkpointable(Protocol):
    """What an agent exposes to be checkpointed (DD-011's save/restore API)."""

    analysis_id: str
    stock_ticker: str
    agent_id: str
    completed_subtasks: list[str]
    pending_subtasks: list[str]
    retry_count: int
    config: dict[str, Any]

    @property
    def agent_type(self) -> str: ...
    @property
    def version(self) -> str: ...
    def calculate_progress(self) -> float: ...
    def next_subtask(self) -> str | None: ...
    def get_interim_results(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RestoredCheckpoint:
    """A restored checkpoint, where it came from and how long it took."""

    checkpoint: Checkpoint
    source: str
    """``redis_backup`` or ``postgresql``."""
    ms: float
    skipped: list[str] = field(default_factory=list)
    """Tiers tried before and why they were not trusted."""
    migrated_from: list[str] = field(default_factory=list)


INSERT = """
INSERT INTO agent_checkpoints (checkpoint_id, stock_ticker, agent_type, agent_id, analysis_id,
    checkpoint_time, progress_pct, current_subtask, completed_subtasks, pending_subtasks,
    failure_reason, retry_count, agent_version, state, state_sha256,
    l1_snapshot, l1_snapshot_hash, l1_snapshot_seq)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
"""


class AgentCheckpointer:
    """Saves and restores agent checkpoints (DD-011) with their L1 snapshots (DD-016)."""

    def __init__(
        self,
        client: redis.Redis,
        pool: ConnectionPool,
        keys: Keys,
        settings: Settings,
        snapshotter: L1CacheSnapshotter,
        migrations: CheckpointMigrations | None = None,
        journal: L1Journal | None = None,
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.settings = settings
        self.snapshotter = snapshotter
        self.migrations = migrations or registry
        self.journal = journal
        self.backup_ttl_ms = settings.checkpoint_backup_ttl * 1000

    def save_checkpoint(
        self,
        agent: Checkpointable,
        subtask_completed: str | None,
        *,
        failure_reason: str | None = None,
        error_details: dict[str, Any] | None = None,
        dual_write: bool | None = None,
    ) -> Checkpoint:
        """Checkpoint ``agent`` after ``subtask_completed`` (None: a failure or pause point).

        ``dual_write`` (default: per durability mode) puts the L1 snapshot in PostgreSQL too.
        """
        snap = self.snapshotter.take(agent.agent_id)
        cp = Checkpoint(
            checkpoint_id=str(uuid.uuid4()),
            analysis_id=check_uuid(agent.analysis_id),
            stock_ticker=agent.stock_ticker,
            agent_type=check_id(agent.agent_type, "agent_type"),
            agent_id=agent.agent_id,
            checkpoint_time=now(),
            agent_version=agent.version,
            progress_pct=round(agent.calculate_progress(), 2),
            current_subtask=agent.next_subtask(),
            completed_subtasks=list(agent.completed_subtasks),
            pending_subtasks=list(agent.pending_subtasks),
            interim_results=agent.get_interim_results(),
            agent_config=dict(agent.config),
            retry_count=agent.retry_count,
            failure_reason=failure_reason,
            error_details=error_details,
            l1_snapshot_hash=snap.hash,
            l1_snapshot_seq=snap.seq,
            extra={"subtask_completed": subtask_completed},
        )
        raw = cp.encode()
        packed, digest = codec.pack(raw), codec.sha256_hex(raw)
        dual = self.settings.durability != Durability.HYBRID if dual_write is None else dual_write
        blob = snap.pack()
        meta = self.snapshotter.meta(snap, cp.checkpoint_id)
        with self.pg.connection() as conn:
            conn.execute(
                INSERT,
                (
                    cp.checkpoint_id,
                    cp.stock_ticker,
                    cp.agent_type,
                    cp.agent_id,
                    cp.analysis_id,
                    cp.checkpoint_time,
                    cp.progress_pct,
                    cp.current_subtask,
                    cp.completed_subtasks,
                    cp.pending_subtasks,
                    failure_reason,
                    cp.retry_count,
                    cp.agent_version,
                    codec.pack(raw),
                    codec.sha256_hex(raw),
                    blob if dual else None,
                    meta.hash if dual else None,
                    meta.seq if dual else None,
                ),
            )
        if dual and self.journal is not None:
            self._compact_log(cp)
        backup_key = self.keys.checkpoint(cp.analysis_id, cp.agent_type)
        try:
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.set(backup_key, seal(digest, packed), px=self.backup_ttl_ms)
                self.snapshotter.write_secondary(pipe, meta, blob)
                pipe.execute()
        except (redis.RedisError, OSError) as exc:
            # durable in PostgreSQL already; never leave an older backup looking newest
            try:
                self.redis.delete(backup_key)
            except (redis.RedisError, OSError):
                log.error("stale checkpoint backup %s may remain in Redis", backup_key)
            raise StoreUnavailable(
                f"checkpoint {cp.checkpoint_id} is in PostgreSQL, but Redis refused its"
                f" backup and snapshot: {exc}",
                checkpoint_id=cp.checkpoint_id,
                agent_id=agent.agent_id,
            ) from None
        return cp

    def restore_checkpoint(
        self, analysis_id: object, agent_type: str, version: str | None = None
    ) -> RestoredCheckpoint:
        """The latest checkpoint: Redis backup first, else PostgreSQL's newest sound row.

        With ``version`` (the agent code's), older records are migrated and newer ones
        refused with ``VersionTooNew``. Raises ``CheckpointNotFound`` if there is none.
        """
        t0 = time.perf_counter()
        aid, atype = check_uuid(analysis_id), check_id(agent_type, "agent_type")
        skipped: list[str] = []
        doc: dict[str, Any] | None = None
        source = "redis_backup"
        try:
            with redis_errors(atype):
                blob = self.redis.get(self.keys.checkpoint(aid, atype))
            if blob is None:
                skipped.append("redis_backup: missing")
            else:
                doc = unseal(cast(bytes, blob))
        except (CheckpointCorrupt, StoreUnavailable) as exc:
            log.warning("checkpoint backup for %s/%s not trusted: %s", aid, atype, exc)
            skipped.append(f"redis_backup: {exc}")
        if doc is None:
            source = "postgresql"
            doc = self._latest_row(aid, atype, skipped)
        migrated: list[str] = []
        if version is not None:
            doc, migrated = self.migrations.upgrade(doc, version)
        return RestoredCheckpoint(
            Checkpoint.from_doc(doc), source, elapsed_ms(t0), skipped, migrated
        )

    def _latest_row(self, aid: str, atype: str, skipped: list[str]) -> dict[str, Any]:
        """The newest row that passes its checksum; older rows are read only if needed."""
        rows = self._rows(aid, atype, 0, 1)
        if rows and (doc := self._verified(rows[0], skipped)) is not None:
            return doc
        for row in self._rows(aid, atype, 1, PG_FALLBACK_ROWS - 1) if rows else []:
            if (doc := self._verified(row, skipped)) is not None:
                return doc
        if rows:
            raise CheckpointCorrupt(
                "no checkpoint passed its checksum: " + "; ".join(skipped),
                analysis_id=aid,
                agent_type=atype,
            )
        raise CheckpointNotFound("no checkpoint for this agent", analysis_id=aid, agent_type=atype)

    def _rows(self, aid: str, atype: str, offset: int, limit: int) -> list[tuple[Any, ...]]:
        with self.pg.connection() as conn:
            return conn.execute(
                "SELECT checkpoint_id, state, state_sha256 FROM agent_checkpoints"
                " WHERE analysis_id = %s AND agent_type = %s ORDER BY id DESC"
                " OFFSET %s LIMIT %s",
                (aid, atype, offset, limit),
            ).fetchall()

    @staticmethod
    def _verified(row: tuple[Any, ...], skipped: list[str]) -> dict[str, Any] | None:
        cid, state, digest = row
        try:
            return decode_doc(codec.unpack(state), digest)
        except (CheckpointCorrupt, codec.CodecError) as exc:
            log.error("checkpoint %s in PostgreSQL is corrupt: %s", cid, exc)
            skipped.append(f"postgresql {cid}: {exc}")
            return None

    def _compact_log(self, cp: Checkpoint) -> None:
        """Let the agent's L1 log drop what no snapshot restore can need any more."""
        assert self.journal is not None
        with self.pg.connection() as conn:
            rows = conn.execute(
                "SELECT l1_snapshot_seq FROM agent_checkpoints WHERE analysis_id = %s"
                " AND agent_type = %s AND l1_snapshot IS NOT NULL ORDER BY id DESC LIMIT %s",
                (cp.analysis_id, cp.agent_type, PG_SNAPSHOTS_TRIED),
            ).fetchall()
        self.journal.compact(cp.agent_id, [int(r[0] or 0) for r in rows])

    def get(self, checkpoint_id: object) -> Checkpoint:
        """One checkpoint by id, from PostgreSQL, checksum verified."""
        cid = check_uuid(checkpoint_id, "checkpoint_id")
        with self.pg.connection() as conn:
            row = conn.execute(
                "SELECT state, state_sha256 FROM agent_checkpoints WHERE checkpoint_id = %s",
                (cid,),
            ).fetchone()
        if row is None:
            raise CheckpointNotFound("no checkpoint with this id", checkpoint_id=cid)
        return Checkpoint.from_doc(decode_doc(codec.unpack(row[0]), row[1]))

    def summaries(
        self, analysis_id: object | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Summary rows (newest first), optionally of one analysis."""
        where, params = (
            ("WHERE analysis_id = %s", [check_uuid(analysis_id)]) if analysis_id else ("", [])
        )
        with self.pg.connection() as conn:
            cur = conn.execute(
                "SELECT checkpoint_id, analysis_id, agent_type, checkpoint_time, progress_pct,"
                " current_subtask, cardinality(completed_subtasks) AS done,"
                " cardinality(completed_subtasks) + cardinality(pending_subtasks) AS total,"
                " failure_reason, retry_count, agent_version, l1_snapshot IS NOT NULL AS dual"
                f" FROM agent_checkpoints {where} ORDER BY id DESC LIMIT %s",
                (*params, limit),
            )
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def delete_backups(self, analysis_id: object, agent_types: list[str]) -> None:
        """Remove the Redis backups of an analysis's agents."""
        keys = [self.keys.checkpoint(analysis_id, t) for t in agent_types]
        if keys:
            self.redis.delete(*keys)

    def extend_backup_ttl(self, analysis_id: object, agent_type: str, seconds: int) -> None:
        """Set the Redis backup's TTL (a pause keeps it as long as the pause may last)."""
        self.redis.expire(self.keys.checkpoint(analysis_id, agent_type), seconds)
