"""Checkpoint retention (DD-011): gone on success, 30 days on failure, kept if preserved."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import redis
from psycopg_pool import ConnectionPool

from amber.checkpoints.model import now
from amber.config import Settings
from amber.keys import Keys, check_uuid
from amber.schema import sql

if TYPE_CHECKING:
    from amber.runtime.analyses import Analyses


@dataclass
class GcReport:
    """What one retention run removed or changed."""

    deleted: dict[str, int] = field(default_factory=dict)
    """analysis_id → checkpoints deleted."""
    expired: list[str] = field(default_factory=list)
    """Paused analyses past the pause limit, now ``expired``."""

    @property
    def total_deleted(self) -> int:
        """Checkpoints deleted in all."""
        return sum(self.deleted.values())


class Retention:
    """Applies the retention policy to checkpoints in PostgreSQL and their Redis backups."""

    def __init__(
        self,
        client: redis.Redis,
        pool: ConnectionPool,
        keys: Keys,
        settings: Settings,
        analyses: Analyses,
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.settings = settings
        self.analyses = analyses

    def purge(self, analysis_id: object, archive: bool = False, results: bool = False) -> int:
        """Delete (or with ``archive``, move) an analysis's checkpoints; returns how many.

        Its agents' results (``analyses.results``) stay unless ``results`` is true. A
        preserved analysis is left alone (returns 0).
        """
        aid = check_uuid(analysis_id)
        record = self.analyses.get(aid)
        if record.preserve:
            return 0
        with self.pg.connection() as conn, conn.transaction():
            if archive:
                conn.execute(sql.ARCHIVE_CHECKPOINTS, (aid,))
            n = conn.execute(sql.DELETE_CHECKPOINTS, (aid,)).rowcount
            if results:
                conn.execute(sql.DELETE_RESULTS, (aid,))
        self.drop_copies([a["agent_id"] for a in record.agents])
        return n

    def drop_copies(self, agent_ids: list[str]) -> None:
        """Delete the agents' Redis copies of checkpoints and snapshots (their checkpoints
        are gone from PostgreSQL)."""
        keys = [self.keys.checkpoint(a) for a in agent_ids]
        keys += [self.keys.l1_snapshot(a) for a in agent_ids]
        keys += [self.keys.l1_snapshot_meta(a) for a in agent_ids]
        if keys:
            self.redis.delete(*keys)

    def gc(
        self,
        at: datetime | None = None,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> GcReport:
        """One pass of the policy at time ``at`` (default now); ``progress(done, total)``
        is called after each analysis it expires or purges.

        * paused longer than the paused TTL → ``expired`` (checkpoints then kept as failures);
        * failed or expired for longer than the failure retention → checkpoints deleted;
        * completed but with checkpoints left (a crash between finish and purge) → deleted.
        """
        at = at or now()
        s = self.settings
        report = GcReport()
        with self.pg.connection() as conn:
            paused = conn.execute(
                sql.PAUSED_BEFORE, (at - timedelta(seconds=s.paused_ttl),)
            ).fetchall()
            doomed = conn.execute(
                sql.DOOMED, (at - timedelta(seconds=s.failed_retention),)
            ).fetchall()
        total = len(paused) + len(doomed)
        for (aid,) in paused:
            report.expired.append(str(aid))
            if not dry_run:
                self.analyses.transition(aid, "expired", ("paused",))
            if progress:
                progress(len(report.expired), total)
        for (aid,) in doomed:
            if dry_run:
                with self.pg.connection() as conn:
                    row = conn.execute(sql.COUNT_CHECKPOINTS, (aid,)).fetchone()
                report.deleted[str(aid)] = int(row[0]) if row else 0
            else:
                report.deleted[str(aid)] = self.purge(aid)
            if progress:
                progress(len(report.expired) + len(report.deleted), total)
        return report
