"""``PauseManager``: stop a whole analysis for days, and continue it with zero duplicate work.

Pause: every agent gets a checkpoint with a forced dual snapshot (Redis secondary
and PostgreSQL) and its keys the paused TTL; a durable pause record says who, why,
when and each agent's state. Resume: every agent's working memory is recovered by
the fastest complete and correct tier, TTLs go back to active, and the coordinator
continues each agent from its next pending subtask.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from amber.agents.coordinator import AgentResult, LeadCoordinator
from amber.errors import AnalysisStateError
from amber.keys import check_uuid
from amber.memory.recovery import RecoveryReport

if TYPE_CHECKING:
    from amber.engines.stack import Stack

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

    @property
    def message(self) -> str:
        """One line for people."""
        if self.already_paused:
            return f"analysis {self.analysis_id} was already paused ({self.reason}); nothing to do"
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
            "message": self.message,
            "agents": {t: {**asdict(r), **self._outcome(t)} for t, r in self.recovery.items()},
            "paused_again": self.paused_again.reason if self.paused_again else None,
        }


class PauseManager:
    """Pauses and resumes analyses (DD-012, with DD-016's L1 durability)."""

    def __init__(self, stack: Stack, coordinator: LeadCoordinator | None = None) -> None:
        self.stack = stack
        self.coordinator = coordinator or stack.coordinator
        self.last_pause: PauseReport | None = None
        self.coordinator.on_quota = lambda aid, result: self._pause_on_quota(aid, result)

    def _pause_on_quota(self, analysis_id: str, result: AgentResult) -> None:
        self.last_pause = self.pause(analysis_id, "quota_exhausted", by=result.agent_type)

    def pause(self, analysis_id: object, reason: str, by: str = "amber") -> PauseReport:
        """Pause a running analysis; a second pause is a no-op that says so.

        Raises ``AnalysisStateError`` for a finished analysis, ``AnalysisNotFound``
        for an unknown one.
        """
        aid = check_uuid(analysis_id)
        st = self.stack
        record = st.analyses.get(aid)
        if record.status == "paused":
            return PauseReport(aid, self._open_pause_reason(aid) or reason, None, True)
        if record.status in FINISHED:
            raise AnalysisStateError(
                f"analysis is {record.status}; only a running analysis can be paused",
                analysis_id=aid,
                status=record.status,
            )
        try:
            st.analyses.transition(aid, "paused", ("running",))
        except AnalysisStateError:
            if st.analyses.get(aid).status == "paused":  # another process won the race
                return PauseReport(aid, self._open_pause_reason(aid) or reason, None, True)
            raise
        try:
            return self._pause_agents(aid, reason, by)
        except BaseException:
            st.analyses.transition(aid, "running", ("paused",))  # not paused after all
            raise

    def _pause_agents(self, aid: str, reason: str, by: str) -> PauseReport:
        st = self.stack
        states = []
        paused_ttl = st.settings.paused_ttl
        for agent in self.coordinator.build_agents(aid):
            cp = st.checkpointer.save_checkpoint(agent, None, dual_write=True)
            backup = st.keys.checkpoint(aid, agent.agent_type)
            keys = st.ttl_manager.extend_ttl_on_pause(agent.agent_id, extra_keys=[backup])
            states.append(
                {
                    "agent_type": agent.agent_type,
                    "agent_id": agent.agent_id,
                    "checkpoint_id": cp.checkpoint_id,
                    "completed": len(cp.completed_subtasks),
                    "total": len(agent.subtasks),
                    "next_subtask": cp.current_subtask,
                    "l1_keys": keys,
                    "l1_snapshot_hash": cp.l1_snapshot_hash,
                }
            )
        with st.pg.connection() as conn:
            row = conn.execute(
                "INSERT INTO analysis_pauses (analysis_id, reason, paused_by, agents)"
                " VALUES (%s, %s, %s, %s) RETURNING paused_at",
                (aid, reason, by, Jsonb(states)),
            ).fetchone()
        log.info("paused %s (%s) with %d agents; TTL %ds", aid, reason, len(states), paused_ttl)
        return PauseReport(aid, reason, row[0] if row else None, False, states)

    def _open_pause_reason(self, aid: str) -> str | None:
        with self.stack.pg.connection() as conn:
            row = conn.execute(
                "SELECT reason FROM analysis_pauses WHERE analysis_id = %s AND resumed_at IS NULL"
                " ORDER BY id DESC LIMIT 1",
                (aid,),
            ).fetchone()
        return str(row[0]) if row else None

    def resume(self, analysis_id: object, by: str = "amber", run: bool = True) -> ResumeReport:
        """Recover every agent's memory, restore active TTLs, and continue the analysis.

        Of two processes resuming at once, exactly one resumes; the other gets a report
        with ``resumed=False`` saying so. With ``run=False`` the agents are recovered but
        not run (the caller runs ``coordinator.run`` itself).
        """
        aid = check_uuid(analysis_id)
        st = self.stack
        record = st.analyses.get(aid)
        try:
            st.analyses.transition(aid, "running", ("paused",))
        except AnalysisStateError:
            status = st.analyses.get(aid).status
            if status == "running":
                return ResumeReport(
                    aid,
                    False,
                    f"analysis {aid} is already running (resumed elsewhere, or never paused)",
                )
            raise
        try:
            recovery = self._recover_agents(aid, record.agents, by)
        except BaseException:
            st.analyses.transition(aid, "paused", ("running",))  # still paused: retry later
            raise
        report = ResumeReport(aid, True, f"resumed analysis {aid}", recovery)
        if run:
            self.last_pause = None
            report.results = self.coordinator.run(aid)
            report.paused_again = self.last_pause
        return report

    def _recover_agents(
        self, aid: str, agents: list[dict[str, Any]], by: str
    ) -> dict[str, RecoveryReport]:
        st = self.stack
        recovery = {}
        for entry in agents:
            rep = st.recovery.recover_agent_state(entry["agent_id"], aid, entry["agent_type"])
            st.checkpointer.extend_backup_ttl(
                aid, entry["agent_type"], st.settings.checkpoint_backup_ttl
            )
            recovery[entry["agent_type"]] = rep
        with st.pg.connection() as conn:
            conn.execute(
                "UPDATE analysis_pauses SET resumed_at = NOW(), resumed_by = %s,"
                " resume_report = %s WHERE analysis_id = %s AND resumed_at IS NULL",
                (by, Jsonb({t: asdict(r) for t, r in recovery.items()}), aid),
            )
        return recovery

    def pauses(self, analysis_id: object) -> list[dict[str, Any]]:
        """Every pause record of an analysis, oldest first."""
        with self.stack.pg.connection() as conn:
            cur = conn.execute(
                "SELECT reason, paused_by, paused_at, agents, resumed_at, resumed_by"
                " FROM analysis_pauses WHERE analysis_id = %s ORDER BY id",
                (check_uuid(analysis_id),),
            )
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
