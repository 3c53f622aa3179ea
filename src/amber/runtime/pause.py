"""``PauseManager``: stop a whole analysis for days, and continue it with zero duplicate work.

Pause: the status becomes ``paused`` (one guarded UPDATE) and a durable pause record
says who, why and when. Then whoever holds the analysis's runner lock freezes its
agents: every agent gets a checkpoint with its L1 snapshot in Redis and PostgreSQL,
its keys the paused TTL. A live runner does it at its next subtask boundary (the
pause never writes under a running subtask); with no live runner, ``pause`` takes
the lock and does it itself, from any process, in every durability mode.

Resume: take the runner lock, recover every agent's working memory by the fastest
complete and correct tier, continue each agent from its newest committed checkpoint.
An analysis left ``running`` by a runner that died is taken over the same way.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from amber import defaults, observe
from amber.errors import AnalysisBusy, AnalysisStateError
from amber.keys import check_reason, check_uuid
from amber.memory.recovery import RecoveryReport
from amber.runtime.analyses import Analyses
from amber.runtime.coordinator import LeadCoordinator
from amber.runtime.leases import Claim
from amber.runtime.results import AgentResult
from amber.runtime.reviews import waiting_for_review

log = logging.getLogger("amber.pause")

FINISHED = ("completed", "failed", "expired")


@dataclass
class PauseReport:
    """What ``pause`` did."""

    analysis_id: str
    reason: str
    paused_at: datetime | None
    already_paused: bool = False
    agents: list[dict[str, Any]] = field(default_factory=list)
    """Per agent: type, id, checkpoint id, progress, keys in its snapshot, snapshot hash."""
    pending: bool = False
    """A live runner holds the analysis: it freezes the agents at its next subtask boundary."""

    @property
    def message(self) -> str:
        """One line for people."""
        if self.already_paused:
            return f"analysis {self.analysis_id} was already paused ({self.reason}); nothing to do"
        if self.pending:
            return (
                f"pausing analysis {self.analysis_id} ({self.reason}): its runner checkpoints"
                " at the end of the subtask it is running"
            )
        return f"paused analysis {self.analysis_id} ({self.reason}), {len(self.agents)} agent(s)"


@dataclass
class ResumeReport:
    """What ``resume`` did: per agent, how its memory came back, and how the run ended."""

    analysis_id: str
    resumed: bool
    message: str
    recovery: dict[str, RecoveryReport] = field(default_factory=dict)
    results: dict[str, AgentResult] = field(default_factory=dict)
    paused_again: PauseReport | None = None
    taken_over: bool = False
    """The analysis was ``running`` with no live runner, and this resume took it over."""

    def _outcome(self, agent_type: str) -> dict[str, Any]:
        result = self.results.get(agent_type)
        return {
            "progress": result.progress if result else None,
            "status": result.status if result else None,
        }

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "analysis_id": self.analysis_id,
            "resumed": self.resumed,
            "taken_over": self.taken_over,
            "message": self.message,
            "agents": {t: {**asdict(r), **self._outcome(t)} for t, r in self.recovery.items()},
            "paused_again": self.paused_again.reason if self.paused_again else None,
        }


class PauseManager:
    """Pauses and resumes analyses (DD-012, with DD-016's L1 durability)."""

    def __init__(self, analyses: Analyses, coordinator: LeadCoordinator) -> None:
        self.analyses = analyses
        self.coordinator = coordinator

    def pause(self, analysis_id: object, reason: str, by: str = "amber") -> PauseReport:
        """Pause a running analysis; a second pause is a no-op that says so.

        Returns at once when a live runner holds the analysis (``pending``: it freezes
        its agents at the end of its current subtask); otherwise freezes them here.
        Raises ``AnalysisStateError`` for a finished analysis, ``AnalysisNotFound`` for
        an unknown one. If freezing fails the analysis stays paused, the failure is
        recorded on the pause, and a resume recovers from the stored tiers.
        """
        aid = check_uuid(analysis_id)
        reason, by = check_reason(reason, "reason"), check_reason(by, "by")
        record = self.analyses.get(aid)
        if record.status == "paused":
            return self._already(aid, reason)
        if record.status in FINISHED:
            raise AnalysisStateError(
                f"analysis is {record.status}; only a running analysis can be paused",
                analysis_id=aid,
                status=record.status,
            )
        try:
            self.analyses.transition(aid, "paused", ("running",))
        except AnalysisStateError:
            if self.analyses.get(aid).status == "paused":  # another process won the race
                return self._already(aid, reason)
            raise
        paused_at = self.analyses.record_pause(aid, reason, by)
        self.analyses.event(aid, "paused", by, reason=reason)
        observe.emit(observe.PAUSE, reason=reason)
        try:
            with self.analyses.runner_lock(aid, defaults.RUNNER_GONE_WAIT) as claim:
                agents, _ = self.coordinator.prepare_agents(
                    record, claim.owner, code=False, token=claim.token
                )
                try:
                    states = self.coordinator.freeze(aid, agents)
                finally:
                    for agent in agents:
                        self.coordinator.release(agent.agent_id)
        except AnalysisBusy:
            log.info("pause of %s requested; its runner freezes it", aid)
            return PauseReport(aid, reason, paused_at, pending=True)
        except BaseException as exc:
            self.analyses.pause_failed(aid, f"{type(exc).__name__}: {exc}")
            raise
        log.info("paused %s (%s) with %d agents", aid, reason, len(states))
        return PauseReport(aid, reason, paused_at, False, states)

    def _already(self, aid: str, reason: str) -> PauseReport:
        open_pause = self.analyses.open_pause(aid)
        return PauseReport(aid, open_pause["reason"] if open_pause else reason, None, True)

    def current_pause(self, analysis_id: object) -> PauseReport | None:
        """The open pause of a paused analysis, or None when it is not paused."""
        aid = check_uuid(analysis_id)
        if self.analyses.get(aid).status != "paused":
            return None
        open_pause = self.analyses.open_pause(aid)
        if open_pause is None:
            return None
        return PauseReport(
            aid,
            open_pause["reason"],
            open_pause["paused_at"],
            pending=open_pause["frozen_at"] is None,
        )

    def resume(self, analysis_id: object, by: str = "amber", run: bool = True) -> ResumeReport:
        """Recover every agent's memory and continue the analysis in this process.

        Resumes a paused analysis, or takes over a ``running`` one whose runner died.
        When a live process runs it, returns ``resumed=False`` saying so. With
        ``run=False`` a paused analysis's agents are recovered and it is running, but
        not run here (``coordinator.run`` runs it); a running one is left alone. A
        resume that fails before its run starts leaves the analysis paused, with the
        failure on its pause record.
        """
        aid = check_uuid(analysis_id)
        by = check_reason(by, "by")
        record = self.analyses.get(aid)
        if record.status in FINISHED:
            raise AnalysisStateError(
                f"analysis is {record.status}; only a paused analysis can be resumed",
                analysis_id=aid,
                status=record.status,
            )
        pause = self.analyses.open_pause(aid) if record.status == "paused" else None
        if pause is not None and pause["reason"] == "awaiting_review":
            waiting = self.coordinator.reviews.list("pending", aid, 20)
            if waiting:  # resuming would only pause again: a decision continues it
                raise AnalysisStateError(
                    f"analysis {aid} is {waiting_for_review(waiting)}; deciding it queues"
                    " the analysis again",
                    analysis_id=aid,
                    status="awaiting_review",
                )
        try:
            with self.analyses.runner_lock(aid, defaults.RUNNER_GONE_WAIT) as claim:
                return self._resume_owned(claim, by, run)
        except AnalysisBusy:
            return ResumeReport(aid, False, f"analysis {aid} is being run by another process")

    def _resume_owned(self, claim: Claim, by: str, run: bool) -> ResumeReport:
        aid = claim.analysis_id
        record = self.analyses.get(aid)
        taken_over = record.status == "running"
        if taken_over and not run:  # taking over without running would orphan it again
            return ResumeReport(aid, False, f"analysis {aid} is already running; nothing to resume")
        if not taken_over:
            self.analyses.transition(aid, "running", ("paused",))  # raises for other states
        try:
            agents, recovery = self.coordinator.prepare_agents(
                record, claim.owner, token=claim.token
            )
        except BaseException as exc:
            if not taken_over:
                self.analyses.transition(aid, "paused", ("running",))  # still paused
                self.analyses.pause_failed(aid, f"resume failed: {type(exc).__name__}: {exc}")
            for entry in record.agents:
                self.coordinator.release(entry["agent_id"])
            raise
        open_pause = self.analyses.open_pause(aid)
        self.analyses.close_pause(aid, by, {t: asdict(r) for t, r in recovery.items()})
        if not taken_over:
            self.analyses.event(aid, "resumed", by)
            observe.emit(observe.RESUME, reason=open_pause["reason"] if open_pause else "")
            verb = "resumed"
        elif claim.prior:  # a run had it and died
            self.analyses.event(aid, "taken_over", by, taken_over_from=claim.prior)
            observe.emit(observe.TAKEOVER)
            verb = "took over"
        else:  # queued, never run: this resume is its first run
            self.analyses.event(aid, "claimed", by)
            verb = "ran queued"
        report = ResumeReport(aid, True, f"{verb} analysis {aid}", recovery, taken_over=taken_over)
        if not run:
            for agent in agents:
                self.coordinator.release(agent.agent_id)
            return report
        report.results = self.coordinator.run_prepared(aid, agents)
        report.paused_again = self.current_pause(aid)
        return report

    def pauses(self, analysis_id: object) -> list[dict[str, Any]]:
        """Every pause record of an analysis, oldest first."""
        return self.analyses.pauses(analysis_id)
