"""``AgentPreparer``: the agents of an analysis built from the app's registry, each with
its working memory recovered as of its newest checkpoint (or rolled back to the newest
checkpoint whose memory can be rebuilt, and said so). The building half of
``LeadCoordinator``."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from amber import observe
from amber.agents.base import AgentRegistry, BaseAgent
from amber.checkpoints.store import AgentCheckpointer
from amber.config import Settings
from amber.errors import (
    CheckpointNotFound,
    CodeChanged,
    MemoryRollbackRefused,
    UnknownAgent,
    fenced,
)
from amber.keys import runner_id
from amber.memory.recovery import DualRecoveryStrategy, RecoveryReport
from amber.runtime.analyses import Analyses, AnalysisRecord

log = logging.getLogger("amber.coordinator")


Registry = AgentRegistry
"""Where agent names stored with an analysis are resolved (the name earlier releases used)."""


class AgentPreparer:
    """Builds an analysis's agents and recovers their memories (see ``LeadCoordinator``)."""

    analyses: Analyses
    checkpointer: AgentCheckpointer
    recovery: DualRecoveryStrategy
    memory: Any
    """Agent id → its ``AgentMemory`` (the stack's factory)."""
    market: Any
    settings: Settings
    registry: AgentRegistry

    # -- building agents ----------------------------------------------------------------
    def prepare_agents(
        self,
        record: AnalysisRecord,
        runner: str | None = None,
        code: bool = True,
        heads: dict[str, int] | None = None,
        token: int | None = None,
    ) -> tuple[list[BaseAgent], dict[str, RecoveryReport]]:
        """The analysis's agents, each with its working memory recovered (and guarded)
        and continued from the newest committed checkpoint.

        Call it holding the analysis's lease (``runner`` is its owner). Raises
        ``UnknownAgent`` for a name the registry lacks and ``CodeChanged`` when an
        agent's declared steps differ from those the analysis started with; nothing is
        changed then. With ``code=False`` (to freeze, not to run) an agent the registry
        lacks is stood in for by its stored state alone. ``heads``: each agent type's
        newest checkpoint sequence, read under the same lease (else read here).
        ``token``: the lease's fencing token; each memory is taken over with it, and
        every write to it carries it.
        """
        runner = runner or runner_id()
        classes = [self._class(e, code) for e in record.agents]
        for entry, cls in zip(record.agents, classes, strict=True):
            if code:
                _check_code(record.analysis_id, entry, cls)
        agents: list[BaseAgent] = []
        reports: dict[str, RecoveryReport] = {}
        if heads is None:
            heads = self.checkpointer.heads(record.analysis_id)
        for entry, cls in zip(record.agents, classes, strict=True):
            memory = self.memory(entry["agent_id"])
            memory.fence(token)
            agent = cls(
                record.analysis_id, record.stock_ticker, memory, self.market, entry.get("config")
            )
            agent.runner = runner
            agent.input = dict(record.input or {})
            fresh = cls.agent_type not in heads  # never checkpointed: no snapshot anywhere
            if not fresh:
                try:
                    restored = self.checkpointer.restore_checkpoint(
                        record.analysis_id, cls.agent_type, cls.version, agent.agent_id
                    )
                    agent.apply_checkpoint(restored.checkpoint, restored.head_seq)
                    if code:
                        _check_subtasks(record.analysis_id, agent)
                except CheckpointNotFound:
                    fresh = True
            # the memory recovered is the checkpoint's, or the agent rolls back to one
            # whose memory could be rebuilt and says so
            reports[agent.agent_type] = self._recover(agent, fresh)
            agents.append(agent)
        return agents, reports

    def _class(self, entry: dict[str, Any], code: bool) -> type[BaseAgent]:
        try:
            return self.registry.resolve(entry["agent_type"])
        except UnknownAgent:
            if code:
                raise
            name = entry["agent_type"]
            attrs = {"agent_type": name, "version": entry.get("version", "1.0"), "dynamic": True}
            return type(f"StandIn[{name}]", (BaseAgent,), attrs)

    def _recover(self, agent: BaseAgent, fresh: bool = False) -> RecoveryReport:
        """Recover the agent's working memory as of the checkpoint it continues from; where
        only an older memory can be rebuilt, roll the agent back to the newest checkpoint
        taken with that memory (or pause, per ``on_memory_lost``)."""
        want = None if fresh else agent.checkpoint_l1
        report = self.recovery.recover_agent_state(
            agent.agent_id, agent.analysis_id, agent.agent_type, fresh, want, agent.l1_cache.token
        )
        if not report.current:
            report = self._roll_back(agent, report)
        agent.l1_cache.guard(report.epoch)
        return report

    def _roll_back(self, agent: BaseAgent, report: RecoveryReport) -> RecoveryReport:
        """The agent continues from the newest checkpoint whose memory ``report`` restored
        (its start if none): the steps after it run again. Recorded on the timeline and
        in the metrics; ``MemoryRollbackRefused`` instead when the settings say pause."""
        head = agent.checkpoint_seq
        assert report.hash is not None
        cp = self.checkpointer.with_memory(
            agent.analysis_id, agent.agent_type, report.hash, head, agent.version
        )
        to = cp.seq if cp is not None else 0
        done = list(agent.completed_subtasks)
        kept = set(cp.completed_subtasks) if cp is not None else set()
        rerun = tuple(s for s in done if s not in kept)
        detail = {
            "agent_type": agent.agent_type,
            "from_checkpoint": head,
            "to_checkpoint": to,
            "rerun": list(rerun),
            "reason": report.reason,
        }
        if self.settings.on_memory_lost == "pause":
            observe.emit(observe.RECOVERY, path="refused")
            raise MemoryRollbackRefused(
                f"{agent.agent_type}: the working memory of checkpoint {head} cannot be"
                f" rebuilt ({report.reason}); the newest that can is checkpoint {to}'s."
                f" Rolling back would run again: {', '.join(rerun) or 'nothing'}. Resume with"
                " on_memory_lost='rollback' (AMBER_ON_MEMORY_LOST=rollback) to do so",
                analysis_id=agent.analysis_id,
                agent_id=agent.agent_id,
                **{k: v for k, v in detail.items() if k not in ("agent_type", "reason")},
            )
        if cp is not None:
            agent.apply_checkpoint(cp, head)
        else:
            agent.restart(head)
        self.checkpointer.snapshotter.forget(agent.agent_id)
        log.warning(
            "%s rolled back from checkpoint %d to %d (its memory was lost: %s); running again: %s",
            agent.agent_id,
            head,
            to,
            report.reason,
            ", ".join(rerun) or "nothing",
        )
        if agent.l1_cache.token is None:  # outside any lease
            self.analyses.event(agent.analysis_id, "rolled_back", agent.runner or None, **detail)
        elif not self.analyses.run_event(agent.analysis_id, "rolled_back", agent.runner, **detail):
            raise fenced(agent.analysis_id, agent.runner, "roll an agent back")
        observe.emit(observe.RECOVERY, path="rolled_back")
        return dataclasses.replace(
            report,
            path="rolled_back",
            current=True,
            rolled_back_from=head,
            rolled_back_to=to,
            rerun=rerun,
        )


def _check_code(analysis_id: str, entry: dict[str, Any], cls: type[BaseAgent]) -> None:
    """Refuse to run code whose declared steps changed under the same version."""
    stored = entry.get("fingerprint")
    if stored is None or stored == cls.fingerprint() or entry.get("version") != cls.version:
        return  # a new version: its checkpoint is migrated on restore (or refused there)
    old, new = list(entry.get("steps") or []), cls.steps_declared()
    raise CodeChanged(
        f"{cls.agent_type} {cls.version} declares other steps than the analysis started"
        f" with: {_difference(old, new)}. Bump {cls.agent_type}'s version and register a"
        " checkpoint migration, or run the code the analysis started with",
        analysis_id=analysis_id,
        agent_type=cls.agent_type,
    )


def _check_subtasks(analysis_id: str, agent: BaseAgent) -> None:
    """A restored subtask agent must know every subtask its checkpoint names, and vice
    versa: a subtask added or removed without a version bump is never skipped silently."""
    if agent.dynamic:
        return
    declared = list(agent.subtasks)
    recorded = [s for s in agent.completed_subtasks if s in declared] + list(agent.pending_subtasks)
    if sorted(set(recorded)) != sorted(declared):
        raise CodeChanged(
            f"{agent.agent_type} {agent.version} declares other subtasks than its checkpoint"
            f" records: {_difference(recorded, declared)}. Bump its version and register a"
            " checkpoint migration, or run the code the analysis started with",
            analysis_id=analysis_id,
            agent_type=agent.agent_type,
        )


def _difference(old: list[str], new: list[str]) -> str:
    added = [s for s in new if s not in old]
    removed = [s for s in old if s not in new]
    parts = []
    if added:
        parts.append(f"added {', '.join(added)}")
    if removed:
        parts.append(f"removed {', '.join(removed)}")
    return "; ".join(parts) or f"reordered (was {', '.join(old)}; now {', '.join(new)})"
