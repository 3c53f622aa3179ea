"""``CheckpointReads``: restore the newest checkpoint PostgreSQL committed (the Redis
backup only when PostgreSQL proves it current), older ones by checksum, and the
read-only queries of the checkpoint table."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from amber import codec, observe
from amber.checkpoints import delta
from amber.checkpoints.model import Checkpoint, unseal
from amber.checkpoints.versions import CheckpointMigrations
from amber.engines.later import Pending
from amber.errors import AmberError, CheckpointCorrupt, CheckpointNotFound, StoreUnavailable
from amber.keys import Keys, check_id, check_uuid
from amber.memory.chain import chain_rows, fold_chain
from amber.memory.reading import redis_errors
from amber.memory.snapshot import elapsed_ms
from amber.schema import sql

log = logging.getLogger("amber.checkpoints")

PG_FALLBACK_ROWS = 3
"""PostgreSQL rows tried at a time, newest first, when the newest fails its checksum."""

PG_FALLBACK_ROUNDS = 3
"""Batches of older rows tried before a restore gives up with ``CheckpointCorrupt``."""

BACKUP_SERVES = 16 * 1024
"""A restore whose Redis backup is read alongside PostgreSQL leaves a stored state longer
than this to the backup (read again from PostgreSQL when the backup is not current); a
shorter one comes with the row, as the backup's reply is not known yet."""

_ANY = 2**31 - 1
"""No bound on a state's length (``NEWEST_CHECKPOINT``)."""


@dataclass(frozen=True)
class RestoredCheckpoint:
    """A restored checkpoint, where it came from and how long it took."""

    checkpoint: Checkpoint
    source: str
    """``redis_backup`` (proved current by PostgreSQL) or ``postgresql``."""
    ms: float
    skipped: list[str] = field(default_factory=list)
    """Tiers tried before and why they were not trusted."""
    migrated_from: list[str] = field(default_factory=list)
    head_seq: int = 0
    """The newest sequence in PostgreSQL: the next checkpoint is ``head_seq + 1`` (it may
    be above ``checkpoint.seq`` when newer rows failed their checksum)."""


class CheckpointReads:
    """Restores and queries of checkpoints (the reading half of ``AgentCheckpointer``)."""

    redis: redis.Redis
    pg: ConnectionPool
    keys: Keys
    migrations: CheckpointMigrations
    mode: str
    """The durability mode, as metrics label checkpoint latencies."""

    def heads(self, analysis_id: object) -> dict[str, int]:
        """Each agent type's newest checkpoint sequence in the analysis (absent: none)."""
        with self.pg.connection() as conn:
            rows = conn.execute(sql.HEADS, (check_uuid(analysis_id),)).fetchall()
        return {str(t): int(seq) for t, seq in rows}

    @observe.traced("amber.checkpoint.restore")
    def restore_checkpoint(
        self,
        analysis_id: object,
        agent_type: str,
        version: str | None = None,
        agent_id: str | None = None,
    ) -> RestoredCheckpoint:
        """The newest checkpoint PostgreSQL has committed.

        With ``agent_id`` the Redis backup is read too and used when it names the
        newest committed sequence; PostgreSQL is asked in every case. The backup's read
        goes out first and its reply is read after PostgreSQL's row, which leaves out a
        state longer than ``BACKUP_SERVES`` bytes for the backup to serve (read again,
        from the row, when the backup is not that row's): one round trip for both. A
        client that cannot hold a connection (a cluster client) reads the backup first
        and asks PostgreSQL for the state only if the backup is not current. A newest
        row that fails its checksum falls back to the next older sound one. With
        ``version`` (the agent code's), older records are migrated and newer ones refused
        with ``VersionTooNew``. Raises ``CheckpointNotFound`` if there is none.
        """
        t0 = time.perf_counter()
        aid, atype = check_uuid(analysis_id), check_id(agent_type, "agent_type")
        skipped: list[str] = []
        backup: tuple[int, dict[str, Any]] | None = None
        pending: Pending | None = None
        if agent_id is not None:
            key = self.keys.checkpoint(check_id(agent_id, "agent_id"))
            pending = Pending.hold(self.redis)
            if pending is None or not pending.send_now([("GET", key)]):
                pending = None  # read first, the ordinary way (its errors are skipped)
                backup = self._read_backup(agent_id, skipped)
        try:
            with self.pg.connection() as conn:
                known, longest = (
                    (-1, BACKUP_SERVES)
                    if pending is not None
                    else (backup[0] if backup else -1, _ANY)
                )
                row = conn.execute(sql.NEWEST_CHECKPOINT, (known, longest, aid, atype)).fetchone()
            if pending is not None and agent_id is not None:
                backup = self._backup_of(agent_id, pending.replies()[0], skipped)
        finally:  # an error or an interrupt: the connection goes back, its reply unread
            if pending is not None and not pending.done:
                pending.drop()
        if row is None:
            raise CheckpointNotFound(
                "no checkpoint for this agent", analysis_id=aid, agent_type=atype
            )
        head, cid, state = row[:3]
        doc: dict[str, Any] | None = None
        source = "redis_backup"
        if (
            backup is not None
            and backup[0] == int(head)
            and delta.value_of(backup[1], "checkpoint_id") == str(cid)
        ):
            try:
                doc = delta.whole(backup[1], row[6:])
            except (CheckpointCorrupt, codec.CodecError) as exc:
                skipped.append(f"redis_backup: {exc}")
        elif backup is not None:
            skipped.append(f"redis_backup: at sequence {backup[0]}, PostgreSQL at {head}")
        if doc is None:
            source = "postgresql"
            doc = self._verified(row, skipped) if state else None
            if doc is None:
                doc = self._older_row(aid, atype, int(head) + (0 if state else 1), skipped)
        doc.setdefault("seq", int(head))
        migrated: list[str] = []
        if version is not None:
            doc, migrated = self.migrations.upgrade(doc, version)
        observe.emit(observe.CHECKPOINT_RESTORE, time.perf_counter() - t0, mode=self.mode)
        return RestoredCheckpoint(
            Checkpoint.from_doc(doc), source, elapsed_ms(t0), skipped, migrated, int(head)
        )

    def with_memory(
        self, analysis_id: object, agent_type: str, memory_hash: str, at_most: int, version: str
    ) -> Checkpoint | None:
        """The newest checkpoint up to sequence ``at_most`` that was taken with the memory
        ``memory_hash`` and passes its checksum (migrated to ``version``); None if none was."""
        aid, atype = check_uuid(analysis_id), check_id(agent_type, "agent_type")
        doc = self._sound(
            sql.CHECKPOINTS_WITH_MEMORY,
            lambda below: (aid, atype, below - 1, memory_hash, PG_FALLBACK_ROWS),
            at_most + 1,
            [],
        )
        if doc is None:
            return None
        doc, _ = self.migrations.upgrade(doc, version)
        return Checkpoint.from_doc(doc)

    def _read_backup(self, agent_id: str, skipped: list[str]) -> tuple[int, dict[str, Any]] | None:
        reply: object
        try:
            reply = self.redis.get(self.keys.checkpoint(agent_id))
        except redis.RedisError as exc:  # judged as the same error read in a reply is
            reply = exc
        return self._backup_of(agent_id, reply, skipped)

    def _backup_of(
        self, agent_id: str, reply: object, skipped: list[str]
    ) -> tuple[int, dict[str, Any]] | None:
        """The backup's ``(sequence, record)`` from Redis's reply to its ``GET`` (bytes,
        None, or the error instead); None, with why in ``skipped``, when it is missing,
        unreadable or not to be trusted."""
        if reply is None:
            skipped.append("redis_backup: missing")
            return None
        try:
            if isinstance(reply, redis.RedisError):  # named as redis_errors names it
                with redis_errors(agent_id):
                    raise reply
            if isinstance(reply, OSError):
                raise StoreUnavailable(f"Redis failed: {reply}", agent_id=agent_id)
            seq, doc = unseal(cast(bytes, reply))
        except StoreUnavailable as exc:
            skipped.append(f"redis_backup: {exc}")
            return None
        except AmberError as exc:  # corrupt, or a key of another type
            log.warning("checkpoint backup of %s not trusted: %s", agent_id, exc)
            skipped.append(f"redis_backup: {exc}")
            return None
        if delta.value_of(doc, "seq") != seq:
            skipped.append("redis_backup: its header and record name different sequences")
            return None
        return seq, doc

    def _older_row(self, aid: str, atype: str, below: int, skipped: list[str]) -> dict[str, Any]:
        """The newest row below sequence ``below`` that passes its checksum."""
        doc = self._sound(
            sql.OLDER_CHECKPOINTS, lambda b: (aid, atype, b, PG_FALLBACK_ROWS), below, skipped
        )
        if doc is None:
            raise CheckpointCorrupt(
                "no checkpoint passed its checksum: " + "; ".join(skipped),
                analysis_id=aid,
                agent_type=atype,
            )
        return doc

    def _sound(
        self,
        statement: str,
        params: Callable[[int], tuple[Any, ...]],
        below: int,
        skipped: list[str],
    ) -> dict[str, Any] | None:
        """The newest row ``statement`` (with ``params(below)``) gives below sequence
        ``below`` whose record passes its checks; tried ``PG_FALLBACK_ROWS`` at a time,
        for ``PG_FALLBACK_ROUNDS``. Each next batch starts below the rows tried, and below
        the newest row after the base rows their deltas named (a damaged base spoils
        every delta on it; the base itself is tried again). None if none passed."""
        for _ in range(PG_FALLBACK_ROUNDS):
            with self.pg.connection() as conn:
                rows = conn.execute(statement, params(below)).fetchall()
            for row in rows:
                if (doc := self._verified(row, skipped)) is not None:
                    return doc
            if not rows:
                break
            below = min(int(r[0]) if r[5] is None else int(r[5]) + 1 for r in rows)
        return None

    @staticmethod
    def _verified(row: tuple[Any, ...], skipped: list[str]) -> dict[str, Any] | None:
        """A row's whole record (a delta folded on its base, as ``sql._records`` gives
        them), checked; None, and why in ``skipped``, when it is unsound."""
        seq, cid, state, digest, size = row[:5]
        try:
            doc = delta.load(state, size, digest, row[6:])
        except (CheckpointCorrupt, codec.CodecError) as exc:
            log.error("checkpoint %s in PostgreSQL is corrupt: %s", cid, exc)
            skipped.append(f"postgresql {cid}: {exc}")
            return None
        doc["seq"] = int(seq)
        return doc

    def get(self, checkpoint_id: object) -> Checkpoint:
        """One checkpoint by id, from PostgreSQL, checksum verified."""
        cid = check_uuid(checkpoint_id, "checkpoint_id")
        with self.pg.connection() as conn:
            row = conn.execute(sql.CHECKPOINT_BY_ID, (cid,)).fetchone()
        if row is None:
            raise CheckpointNotFound("no checkpoint with this id", checkpoint_id=cid)
        seq, _, state, digest, size = row[:5]
        try:
            doc = delta.load(state, size, digest, row[6:])
        except (CheckpointCorrupt, codec.CodecError) as exc:
            raise CheckpointCorrupt(str(exc), checkpoint_id=cid) from None
        return Checkpoint.from_doc({**doc, "seq": seq})

    def snapshot_of(self, checkpoint_id: object) -> dict[str, codec.Entry] | None:
        """The L1 snapshot stored with a checkpoint (rebuilt from its chain of deltas, each
        row's hash checked), or None if it has none."""
        cid = check_uuid(checkpoint_id, "checkpoint_id")
        with self.pg.connection() as conn:
            row = conn.execute(sql.SNAPSHOT_BY_CHECKPOINT_ID, (cid,)).fetchone()
            if row is None:
                raise CheckpointNotFound("no checkpoint with this id", checkpoint_id=cid)
            aid, atype, seq, stored = row
            if not stored:
                return None
            rows = chain_rows(conn, aid, atype, int(seq) + 1)
        chain, error = fold_chain(rows)
        if error or not chain or rows[len(chain) - 1][0] != seq:
            raise CheckpointCorrupt(
                f"snapshot: {error or 'its chain is incomplete'}", checkpoint_id=cid
            )
        return chain.loaded(-1).memory

    def ids_like(self, prefix: str, limit: int = 5) -> list[str]:
        """Checkpoint ids that start with ``prefix``, at most ``limit``."""
        with self.pg.connection() as conn:
            rows = conn.execute(sql.CHECKPOINT_IDS_LIKE, (sql.like_prefix(prefix), limit))
            return [str(r[0]) for r in rows.fetchall()]

    def summaries(
        self, analysis_id: object | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Summary rows (newest first), optionally of one analysis."""
        where, params = (
            ("WHERE c.analysis_id = %s", [check_uuid(analysis_id)]) if analysis_id else ("", [])
        )
        query = sql.CHECKPOINT_SUMMARIES.format(where=where)
        with self.pg.connection() as conn:
            return conn.cursor(row_factory=dict_row).execute(query, (*params, limit)).fetchall()

    def latest(self, analysis_id: object) -> dict[str, dict[str, Any]]:
        """Each agent type's newest checkpoint of an analysis, by agent type: the summary
        row of ``summaries`` plus ``steps``, the subtasks it had done. One statement, so
        it is never half before and half after a change."""
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            rows = conn.cursor(row_factory=dict_row).execute(sql.LATEST_CHECKPOINTS, (aid,))
            return {str(r["agent_type"]): r for r in rows.fetchall()}

    def extend_backup_ttl(self, agent_id: str, seconds: int) -> None:
        """Set the Redis backup's TTL (a pause keeps it as long as the pause may last)."""
        with redis_errors(agent_id):
            self.redis.expire(self.keys.checkpoint(agent_id), seconds)
