"""The ``analyses`` table: one row per analysis, its agents and its status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from amber.errors import AnalysisNotFound, AnalysisStateError
from amber.keys import check_uuid

STATUSES = ("running", "paused", "completed", "failed", "expired")
"""running → paused ⇄ running → completed | failed; paused past its limit → expired."""


@dataclass(frozen=True)
class AnalysisRecord:
    """One analysis as stored."""

    analysis_id: str
    stock_ticker: str
    agents: list[dict[str, Any]]
    """Each: ``agent_type``, ``agent_id``, ``cls`` (module:qualname), ``version``."""
    status: str
    preserve: bool
    created_at: datetime
    updated_at: datetime


RUNNER_LOCK_SPACE = 0x616D62  # advisory lock namespace of analysis runners
_COLUMNS = "analysis_id, stock_ticker, agents, status, preserve, created_at, updated_at"


class Analyses:
    """Reads and moves analyses between statuses, atomically."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pg = pool

    def create(self, analysis_id: str, stock_ticker: str, agents: list[dict[str, Any]]) -> None:
        """Insert a running analysis."""
        with self.pg.connection() as conn:
            conn.execute(
                "INSERT INTO analyses (analysis_id, stock_ticker, agents, status)"
                " VALUES (%s, %s, %s, 'running')",
                (analysis_id, stock_ticker, Jsonb(agents)),
            )

    def get(self, analysis_id: object) -> AnalysisRecord:
        """One analysis; ``AnalysisNotFound`` if there is none."""
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM analyses WHERE analysis_id = %s", (aid,)
            ).fetchone()
        if row is None:
            raise AnalysisNotFound("no analysis with this id", analysis_id=aid)
        return AnalysisRecord(str(row[0]), *row[1:])

    def list(self, status: str | None = None, limit: int = 100) -> list[AnalysisRecord]:
        """Analyses, newest first, optionally of one status."""
        where = "WHERE status = %s" if status else ""
        params: tuple[Any, ...] = (status, limit) if status else (limit,)
        with self.pg.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM analyses {where} ORDER BY created_at DESC LIMIT %s",
                params,
            ).fetchall()
        return [AnalysisRecord(str(r[0]), *r[1:]) for r in rows]

    def transition(self, analysis_id: object, to: str, allowed_from: tuple[str, ...]) -> None:
        """Move to ``to`` if the status is one of ``allowed_from``.

        One UPDATE ... WHERE status = ANY(...): of two processes racing, exactly one wins;
        the other gets ``AnalysisStateError`` naming the status it found.
        """
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            cur = conn.execute(
                "UPDATE analyses SET status = %s, updated_at = NOW(),"
                " finished_at = CASE WHEN %s IN ('completed', 'failed') THEN NOW() END"
                " WHERE analysis_id = %s AND status = ANY(%s)",
                (to, to, aid, list(allowed_from)),
            )
        if cur.rowcount == 0:
            current = self.get(aid).status
            raise AnalysisStateError(
                f"analysis is {current}; cannot become {to}",
                analysis_id=aid,
                status=current,
            )

    @contextlib.contextmanager
    def runner_lock(self, analysis_id: object) -> Iterator[None]:
        """Be the only process running this analysis, for the duration of the block.

        A session advisory lock on a connection held for the run: released when the
        block ends, or when the process dies and its connection closes. A second
        runner gets ``AnalysisStateError`` at once.
        """
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (RUNNER_LOCK_SPACE, aid)
            ).fetchone()
            if not row or not row[0]:
                raise AnalysisStateError(
                    "another process is running this analysis", analysis_id=aid
                )
            try:
                yield
            finally:
                conn.execute(
                    "SELECT pg_advisory_unlock(%s, hashtext(%s))", (RUNNER_LOCK_SPACE, aid)
                )

    def set_preserve(self, analysis_id: object, preserve: bool = True) -> None:
        """Exempt (or stop exempting) an analysis from retention."""
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            cur = conn.execute(
                "UPDATE analyses SET preserve = %s WHERE analysis_id = %s", (preserve, aid)
            )
        if cur.rowcount == 0:
            raise AnalysisNotFound("no analysis with this id", analysis_id=aid)
