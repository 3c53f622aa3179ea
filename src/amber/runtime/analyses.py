"""The ``analyses`` table: one row per analysis, its agents and its status."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from amber import defaults
from amber.errors import (
    AmberError,
    AnalysisBusy,
    AnalysisNotFound,
    AnalysisStateError,
    InvalidValue,
    fenced,
)
from amber.keys import check_uuid, runner_id
from amber.runtime import sql as runtime_sql
from amber.runtime.leases import Claim, Leases, wait_for
from amber.schema import sql


@dataclass(frozen=True)
class AnalysisRecord:
    """One analysis as stored."""

    analysis_id: str
    stock_ticker: str
    agents: list[dict[str, Any]]
    """Each: ``agent_type`` (a registry name), ``agent_id``, ``version``, ``config``,
    ``fingerprint`` (of its declared steps) and ``steps``."""
    status: str
    preserve: bool
    created_at: datetime
    updated_at: datetime
    definition: str | None = None
    """The application's analysis definition it was submitted as, if any."""
    input: dict[str, Any] | None = None
    """What it was submitted with (``ctx.input``)."""
    lease_owner: str | None = None
    """The run that last leased it (live or not: see ``Analyses.has_runner``)."""


class Analyses:
    """Reads and moves analyses between statuses, atomically; their pause records, results
    and timeline; and the leases that let one run at a time run an analysis."""

    def __init__(
        self,
        pool: ConnectionPool,
        lease_seconds: float = defaults.LEASE_SECONDS,
        stuck_seconds: float | None = None,
    ) -> None:
        self.pg = pool
        self.leases = Leases(pool, lease_seconds, stuck_seconds)

    def create(
        self,
        analysis_id: str,
        stock_ticker: str,
        agents: list[dict[str, Any]],
        preserve: bool = False,
        definition: str | None = None,
        input: dict[str, Any] | None = None,
        by: str = "amber",
    ) -> None:
        """Insert a running, unleased analysis (queued for the first claimer), and its
        ``submitted`` event, in one transaction."""
        with self.pg.connection() as conn, conn.transaction():
            conn.execute(
                sql.INSERT_ANALYSIS,
                (
                    analysis_id,
                    stock_ticker,
                    Jsonb(agents),
                    preserve,
                    definition,
                    Jsonb(input) if input is not None else None,
                ),
            )
            detail = {"definition": definition} if definition else None
            conn.execute(sql.ADD_EVENT, (analysis_id, "submitted", by, _jsonb(detail)))

    def get(self, analysis_id: object) -> AnalysisRecord:
        """One analysis; ``AnalysisNotFound`` if there is none."""
        aid = check_uuid(analysis_id)
        with self.pg.connection() as conn:
            row = conn.execute(sql.ANALYSIS, (aid,)).fetchone()
        if row is None:
            raise AnalysisNotFound("no analysis with this id", analysis_id=aid)
        return self.record(row)

    @staticmethod
    def record(row: tuple[Any, ...]) -> AnalysisRecord:
        """The record of a row of ``sql.ANALYSIS_COLUMNS``."""
        return AnalysisRecord(str(row[0]), *row[1:])

    def list(self, status: str | None = None, limit: int = 100) -> list[AnalysisRecord]:
        """Analyses, newest first, optionally of one status."""
        where = "WHERE status = %s" if status else ""
        params: tuple[Any, ...] = (status, limit) if status else (limit,)
        with self.pg.connection() as conn:
            rows = conn.execute(sql.ANALYSES.format(where=where), params).fetchall()
        return [self.record(r) for r in rows]

    def ids_like(self, prefix: str, limit: int = 5) -> builtins.list[str]:
        """Analysis ids that start with ``prefix``, at most ``limit``."""
        return self._column(sql.ANALYSIS_IDS_LIKE, (sql.like_prefix(prefix), limit))

    def agent_ids_like(self, prefix: str, limit: int = 5) -> builtins.list[str]:
        """Ids of agents of any analysis that start with ``prefix``, at most ``limit``."""
        return self._column(sql.AGENT_IDS_LIKE, (sql.like_prefix(prefix), limit))

    def status_counts(self) -> dict[str, int]:
        """How many analyses have each status (a status with none is absent)."""
        with self.pg.connection() as conn:
            return {str(s): int(n) for s, n in conn.execute(sql.STATUS_COUNTS).fetchall()}

    def recent_failures(self, since: datetime, limit: int = 5) -> builtins.list[AnalysisRecord]:
        """Analyses that failed at or after ``since``, newest first."""
        with self.pg.connection() as conn:
            rows = conn.execute(sql.RECENT_FAILURES, (since, limit)).fetchall()
        return [self.record(r) for r in rows]

    def transition(
        self,
        analysis_id: object,
        to: str,
        allowed_from: tuple[str, ...],
        owner: str | None = None,
    ) -> None:
        """Move to ``to`` if the status is one of ``allowed_from`` (and, with ``owner``,
        that run still holds the lease: ``Fenced`` otherwise).

        One UPDATE ... WHERE status = ANY(...): of two processes racing, exactly one wins;
        the other gets ``AnalysisStateError`` naming the status it found.
        """
        aid = check_uuid(analysis_id)
        params = {"to": to, "analysis_id": aid, "allowed": list(allowed_from), "owner": owner}
        with self.pg.connection() as conn:
            row = conn.execute(sql.TRANSITION, params).fetchone()
        if row is None:
            raise self._refused(aid, to, owner)

    def _refused(self, aid: str, to: str, owner: str | None = None) -> AmberError:
        """Why the analysis could not become ``to``: the status it has now, or (with
        ``owner``) that the run no longer holds it."""
        record = self.get(aid)
        if owner is not None and record.lease_owner != owner and record.status == "running":
            return fenced(aid, owner, f"become {to}")
        return AnalysisStateError(
            f"analysis is {record.status}; cannot become {to}",
            analysis_id=aid,
            status=record.status,
        )

    def finish(
        self,
        analysis_id: str,
        to: str,
        results: builtins.list[tuple[str, str, str, Any, builtins.list[str]]],
        by: str | None,
        purge: bool = False,
        owner: str | None = None,
        **detail: Any,
    ) -> None:
        """End a running analysis in one transaction: ``to`` (completed or failed), each
        agent's result (agent_id, agent_type, status, result, steps), the event, and with
        ``purge`` its checkpoints deleted. ``AnalysisStateError`` (and nothing written)
        if it is no longer running."""
        rows = [
            {"agent_id": a, "agent_type": t, "status": s, "result": r, "steps": st}
            for a, t, s, r, st in results
        ]
        params = {
            "to": to,
            "analysis_id": analysis_id,
            "results": Jsonb(rows),
            "by": by,
            "detail": _jsonb(detail or None),
            "purge": purge,
            "owner": owner,
        }
        try:
            with self.pg.connection() as conn:  # one statement: all of it, or none
                row = conn.execute(sql.FINISH, params).fetchone()
        except psycopg.DataError as exc:  # a result PostgreSQL cannot hold: nothing written
            raise InvalidValue(
                f"the analysis's results cannot be stored: {exc}".strip(),
                analysis_id=analysis_id,
                field="results",
            ) from None
        if row is None or not row[0]:
            raise self._refused(analysis_id, to, owner)
        if owner is not None:
            self.leases.given_back(owner)

    @contextlib.contextmanager
    def runner_lock(
        self, analysis_id: object, wait: float = 0.0, owner: str | None = None
    ) -> Iterator[Claim]:
        """Be the only run of this analysis, for the block: lease it (``AnalysisBusy`` if a
        live run holds it after ``wait`` seconds), renewed by this process's heartbeat,
        released when the block ends. Yields the claim; its ``owner`` writes the run's
        checkpoints. A process that dies frees its leases when PostgreSQL sees its
        liveness connection close (a moment after the death: ``wait`` allows for it).
        """
        aid = check_uuid(analysis_id)
        me = owner or runner_id()
        claim = wait_for(lambda: self.leases.claim(aid, me), wait)
        if claim is None:
            self.get(aid)  # AnalysisNotFound for an analysis that does not exist
            raise AnalysisBusy("another process is running this analysis", analysis_id=aid)
        try:
            yield claim
        finally:
            self.leases.release(aid, me)

    def has_runner(self, analysis_id: object) -> bool:
        """Whether a live run holds the analysis's lease."""
        return self.leases.holder(check_uuid(analysis_id)) is not None

    # -- the workers alive, and what they can run -----------------------------------------
    def worker_seen(self, name: str, app: str, agent_types: builtins.list[str]) -> None:
        """Record that worker ``name`` is alive (its process's liveness lock held) and
        runs ``agent_types``."""
        key = self.leases.liveness.ensure()
        with self.pg.connection() as conn:
            conn.execute(runtime_sql.WORKER_SEEN, (name, app, agent_types, key))

    def worker_gone(self, name: str) -> None:
        """Forget a worker that stopped."""
        with self.pg.connection() as conn:
            conn.execute(runtime_sql.WORKER_GONE, (name,))

    def unserved(self, analysis_id: str) -> builtins.list[str]:
        """The queued analysis's agent names no live worker registers (empty when none is
        alive)."""
        return self._unserved(analysis_id, None)

    def unserved_anywhere(self) -> builtins.list[str]:
        """Agent names queued analyses need that no live worker registers (a few)."""
        return self._unserved(None, 20)

    def _unserved(self, analysis_id: str | None, limit: int | None) -> builtins.list[str]:
        params = {
            "aid": analysis_id,
            "limit": limit,
            "live": defaults.WORKER_LIVE_SECONDS,
            "space": sql.LIVENESS_SPACE,
        }
        with self.pg.connection() as conn:
            return [str(r[0]) for r in conn.execute(runtime_sql.UNSERVED, params).fetchall()]

    def unrunnable(
        self, known: builtins.list[str], limit: int = 20
    ) -> builtins.list[tuple[str, builtins.list[str]]]:
        """Queued analyses an app registering ``known`` cannot run, with what it lacks."""
        params = {"known": known, "limit": limit, "space": sql.LIVENESS_SPACE}
        with self.pg.connection() as conn:
            rows = conn.execute(runtime_sql.UNRUNNABLE, params).fetchall()
        return [(str(r[0]), [str(x) for x in r[1]]) for r in rows]

    def queued(self) -> int:
        """How many running analyses no live run holds (queued for a worker)."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.QUEUED_COUNT, {"space": sql.LIVENESS_SPACE}).fetchone()
        return int(row[0]) if row else 0

    def in_flight(self) -> int:
        """How many running analyses a live run holds."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.IN_FLIGHT_COUNT, {"space": sql.LIVENESS_SPACE}).fetchone()
        return int(row[0]) if row else 0

    def retry(self, analysis_id: object, by: str = "amber") -> None:
        """Queue a failed analysis again: it continues from its last checkpoints."""
        aid = check_uuid(analysis_id)
        current = self.get(aid).status
        if current != "failed":
            raise AnalysisStateError(
                f"analysis is {current}; only a failed analysis can be retried",
                analysis_id=aid,
                status=current,
            )
        self.transition(aid, "running", ("failed",))
        self.event(aid, "retried", by)

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
        rows = self._rows(sql.OPEN_PAUSE, (analysis_id,))
        return rows[0] if rows else None

    def close_pause(self, analysis_id: str, by: str, report: dict[str, Any]) -> None:
        """Mark the open pause resumed, with the recovery report."""
        with self.pg.connection() as conn:
            conn.execute(sql.RESUME_PAUSE, (by, Jsonb(report), analysis_id))

    def pauses(self, analysis_id: object) -> builtins.list[dict[str, Any]]:
        """Every pause record of an analysis, oldest first, with the recovery report
        (``resume_report``: per agent, the tier its memory came back from) once resumed."""
        return self._rows(sql.PAUSES, (check_uuid(analysis_id),))

    # -- results and the timeline ----------------------------------------------------------
    def save_result(
        self,
        analysis_id: str,
        agent_id: str,
        agent_type: str,
        status: str,
        result: Any,
        steps: builtins.list[str],
    ) -> None:
        """Keep an agent's outcome (it outlives the analysis's checkpoints)."""
        with self.pg.connection() as conn:
            conn.execute(
                sql.SAVE_RESULT,
                (analysis_id, agent_id, agent_type, status, Jsonb(result), steps),
            )

    def results(self, analysis_id: object) -> builtins.list[dict[str, Any]]:
        """Each finished agent's outcome: type, id, status, result, steps, finished_at."""
        return self._rows(sql.RESULTS, (check_uuid(analysis_id),))

    def event(self, analysis_id: str, kind: str, by: str | None = None, **detail: Any) -> None:
        """Add to the analysis's timeline (submitted, claimed, paused, completed, ...)."""
        with self.pg.connection() as conn:
            conn.execute(sql.ADD_EVENT, (analysis_id, kind, by, _jsonb(detail or None)))

    def run_event(self, analysis_id: str, kind: str, owner: str, **detail: Any) -> bool:
        """Add an event of the run ``owner`` to the timeline, fenced by its lease: False
        (nothing written) once the run no longer holds the analysis."""
        params = {
            "analysis_id": analysis_id,
            "kind": kind,
            "by": owner,
            "owner": owner,
            "detail": _jsonb(detail or None),
        }
        with self.pg.connection() as conn:
            return conn.execute(sql.RUN_EVENT, params).rowcount > 0

    def timeline(self, analysis_id: object) -> builtins.list[dict[str, Any]]:
        """The analysis's events, oldest first: at, kind, by, detail."""
        return self._rows(sql.EVENTS, (check_uuid(analysis_id),))

    def _column(self, query: str, params: tuple[Any, ...]) -> builtins.list[str]:
        with self.pg.connection() as conn:
            return [str(r[0]) for r in conn.execute(query, params).fetchall()]

    def _rows(self, query: str, params: tuple[Any, ...]) -> builtins.list[dict[str, Any]]:
        with self.pg.connection() as conn:
            return conn.cursor(row_factory=dict_row).execute(query, params).fetchall()

    def close(self) -> None:
        """Stop the lease heartbeat and give up this process's liveness lock."""
        self.leases.close()


def _jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)
