"""The ``analyses`` table: one row per analysis, its agents and its status."""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from amber.errors import AnalysisBusy, AnalysisNotFound, AnalysisStateError
from amber.keys import check_uuid
from amber.schema import sql


@dataclass(frozen=True)
class AnalysisRecord:
    """One analysis as stored."""

    analysis_id: str
    stock_ticker: str
    agents: list[dict[str, Any]]
    """Each: ``agent_type``, ``agent_id``, ``cls`` (module:qualname), ``version``, ``config``."""
    status: str
    preserve: bool
    created_at: datetime
    updated_at: datetime


class Analyses:
    """Reads and moves analyses between statuses, atomically; their pause records; and
    the runner lock that lets one process at a time run an analysis."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pg = pool

    def create(
        self,
        analysis_id: str,
        stock_ticker: str,
        agents: list[dict[str, Any]],
        preserve: bool = False,
    ) -> None:
        """Insert a running analysis."""
        with self.pg.connection() as conn:
            conn.execute(sql.INSERT_ANALYSIS, (analysis_id, stock_ticker, Jsonb(agents), preserve))

    def get(self, analysis_id: object) -> AnalysisRecord:
        """One analysis; ``AnalysisNotFound`` if there is none."""
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            row = conn.execute(sql.ANALYSIS, (aid,)).fetchone()
        if row is None:
            raise AnalysisNotFound("no analysis with this id", analysis_id=aid)
        return AnalysisRecord(str(row[0]), *row[1:])

    def list(self, status: str | None = None, limit: int = 100) -> list[AnalysisRecord]:
        """Analyses, newest first, optionally of one status."""
        where = "WHERE status = %s" if status else ""
        params: tuple[Any, ...] = (status, limit) if status else (limit,)
        with self.pg.connection() as conn:
            rows = conn.execute(sql.ANALYSES.format(where=where), params).fetchall()
        return [AnalysisRecord(str(r[0]), *r[1:]) for r in rows]

    def transition(self, analysis_id: object, to: str, allowed_from: tuple[str, ...]) -> None:
        """Move to ``to`` if the status is one of ``allowed_from``.

        One UPDATE ... WHERE status = ANY(...): of two processes racing, exactly one wins;
        the other gets ``AnalysisStateError`` naming the status it found.
        """
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            row = conn.execute(
                sql.TRANSITION, {"to": to, "analysis_id": aid, "allowed": list(allowed_from)}
            ).fetchone()
        if row is None:
            current = self.get(aid).status
            raise AnalysisStateError(
                f"analysis is {current}; cannot become {to}",
                analysis_id=aid,
                status=current,
            )

    @contextlib.contextmanager
    def runner_lock(self, analysis_id: object, wait: float = 0.0) -> Iterator[None]:
        """Be the only process running (or pausing) this analysis, for the block.

        A session advisory lock on a connection held for the block: released when the
        block ends, or when the process dies and PostgreSQL sees its connection close
        (a moment after the death: ``wait`` seconds are allowed for that). Another
        process gets ``AnalysisBusy``.
        """
        aid = check_uuid(analysis_id)
        deadline = time.monotonic() + wait
        with self.pg.connection() as conn:
            while True:
                row = conn.execute(sql.TRY_RUNNER_LOCK, (sql.RUNNER_LOCK_SPACE, aid)).fetchone()
                if row and row[0]:
                    break
                if time.monotonic() >= deadline:
                    raise AnalysisBusy("another process is running this analysis", analysis_id=aid)
                time.sleep(0.05)
            try:
                yield
            finally:
                conn.execute(sql.RUNNER_UNLOCK, (sql.RUNNER_LOCK_SPACE, aid))

    def has_runner(self, analysis_id: object) -> bool:
        """Whether a live process holds the analysis's runner lock."""
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            row = conn.execute(sql.RUNNER_HELD, (sql.RUNNER_LOCK_SPACE, aid)).fetchone()
        return bool(row and row[0])

    def set_preserve(self, analysis_id: object, preserve: bool = True) -> None:
        """Exempt (or stop exempting) an analysis from retention."""
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            cur = conn.execute(sql.SET_PRESERVE, (preserve, aid))
        if cur.rowcount == 0:
            raise AnalysisNotFound("no analysis with this id", analysis_id=aid)

    # -- pause records ---------------------------------------------------------------------
    def record_pause(self, analysis_id: str, reason: str, by: str) -> datetime:
        """A durable record of a requested pause; returns when it was requested."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.INSERT_PAUSE, (analysis_id, reason, by)).fetchone()
        assert row is not None
        return cast(datetime, row[1])

    def freeze_pause(
        self, analysis_id: str, agents: builtins.list[dict[str, Any]]
    ) -> tuple[str, datetime] | None:
        """Record the agents' pause checkpoints in the open pause; (reason, paused_at)."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.FREEZE_PAUSE, (Jsonb(agents), analysis_id)).fetchone()
        return (str(row[0]), cast(datetime, row[1])) if row else None

    def pause_failed(self, analysis_id: str, error: str) -> None:
        """Note on the open pause why its agents could not be frozen."""
        with self.pg.connection() as conn:
            conn.execute(sql.PAUSE_FAILED, (error, analysis_id))

    def open_pause(self, analysis_id: str) -> dict[str, Any] | None:
        """The pause not yet resumed: reason, paused_by, paused_at, frozen_at; or None."""
        with self.pg.connection() as conn:
            cur = conn.execute(sql.OPEN_PAUSE, (analysis_id,))
            row = cur.fetchone()
            names = [c.name for c in cur.description or []]
        return dict(zip(names, row, strict=True)) if row else None

    def close_pause(self, analysis_id: str, by: str, report: dict[str, Any]) -> None:
        """Mark the open pause resumed, with the recovery report."""
        with self.pg.connection() as conn:
            conn.execute(sql.RESUME_PAUSE, (by, Jsonb(report), analysis_id))

    def pauses(self, analysis_id: object) -> builtins.list[dict[str, Any]]:
        """Every pause record of an analysis, oldest first."""
        with self.pg.connection() as conn:
            cur = conn.execute(sql.PAUSES, (check_uuid(analysis_id),))
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
