"""``LeadCoordinator``: runs an analysis's agents subtask by subtask, checkpointing each.

One process at a time runs an analysis: the runner lock (``Analyses.runner_lock``)
is held for the run and dies with the process. Whoever holds it does every write
of the analysis's checkpoints, a pause's included, so a pause never races the
subtask it stops: a pause requested from elsewhere only flips the status, and the
runner freezes its agents at the next subtask boundary.
"""

from __future__ import annotations

import copy
import importlib
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from amber.agents.base import AGENT_TYPES, BaseAgent
from amber.agents.market import MarketDataClient
from amber.checkpoints.analyses import Analyses, AnalysisRecord
from amber.checkpoints.retention import Retention
from amber.checkpoints.store import AgentCheckpointer, runner_id
from amber.config import Settings
from amber.errors import (
    AmberError,
    AnalysisStateError,
    CheckpointConflict,
    CheckpointNotFound,
    ConsistencyError,
    MemoryLost,
    QuotaExceeded,
    StoreUnavailable,
)
from amber.keys import check_id, check_ticker, check_uuid, check_version
from amber.memory.recovery import DualRecoveryStrategy, RecoveryReport
from amber.memory.ttl import L1TTLManager
from amber.memory.working import AgentMemory

log = logging.getLogger("amber.coordinator")

STORAGE_ERRORS = (StoreUnavailable, CheckpointConflict, ConsistencyError, AnalysisStateError)
"""Errors that stop a run instead of counting as the subtask's failure."""

LOSS_RECOVERIES = 5
"""Times one subtask may recover lost working memory and start again before giving up."""


@dataclass
class AgentResult:
    """How one agent's run ended."""

    agent_type: str
    agent_id: str
    status: str
    """``completed``, ``quota_exhausted``, ``failed``, or ``paused`` (from elsewhere)."""
    completed: list[str]
    total: int
    retry_count: int
    deliverables: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def progress(self) -> str:
        """'3 of 5 subtasks'."""
        return f"{len(self.completed)} of {self.total} subtasks"


@dataclass
class Stop:
    """Why an agent stopped before finishing: what its pause checkpoint records."""

    status: str
    error: str | None = None
    details: dict[str, Any] | None = None


def _resolve(entry: dict[str, Any]) -> type[BaseAgent]:
    if entry["agent_type"] not in AGENT_TYPES:
        module, _, _ = str(entry["cls"]).partition(":")
        try:
            importlib.import_module(module)
        except Exception as exc:  # the user's module failed to import
            raise AmberError(
                f"agent module {module!r} could not be imported: {type(exc).__name__}: {exc}",
                agent_type=entry["agent_type"],
            ) from None
    cls = AGENT_TYPES.get(entry["agent_type"])
    if cls is None:
        raise AmberError(
            f"no agent class registers agent_type {entry['agent_type']!r}",
            agent_type=entry["agent_type"],
        )
    return cls


OnAgent = Callable[[BaseAgent], None]
OnSubtask = Callable[[BaseAgent, str], None]


class LeadCoordinator:
    """Starts analyses, runs their agents, continues them from their checkpoints.

    ``market`` is shared by every agent it builds, so its ledger counts all calls.
    ``subtask_starts`` counts every ``run_subtask`` call by (analysis, agent type,
    subtask), and ``reexecuted`` counts starts of subtasks already checkpointed as
    done: the duplicate-work probe, which must stay 0.
    """

    def __init__(
        self,
        analyses: Analyses,
        checkpointer: AgentCheckpointer,
        recovery: DualRecoveryStrategy,
        ttl_manager: L1TTLManager,
        retention: Retention,
        memory: Callable[[str], AgentMemory],
        settings: Settings,
        release: Callable[[str], None] = lambda agent_id: None,
        market: MarketDataClient | None = None,
    ) -> None:
        self.analyses = analyses
        self.checkpointer = checkpointer
        self.recovery = recovery
        self.ttl_manager = ttl_manager
        self.retention = retention
        self.memory = memory
        self.settings = settings
        self.release = release
        """Called with each agent id when a run ends (closes its write-ahead log)."""
        self.market = market or MarketDataClient()
        self.subtask_starts: Counter[tuple[str, str, str]] = Counter()
        self.reexecuted = 0
        self.on_progress: OnAgent | None = None
        """Called after every checkpointed subtask (progress bars)."""
        self.on_subtask_start: OnSubtask | None = None
        """Called with (agent, subtask) right before a subtask runs."""

    def start_analysis(
        self,
        stock_ticker: str,
        agent_classes: Sequence[type[BaseAgent]],
        config: dict[str, Any] | None = None,
        preserve: bool = False,
    ) -> str:
        """Register a new analysis of ``stock_ticker`` by these agents; returns its id.

        With ``preserve`` its checkpoints are kept after it completes.
        """
        stock_ticker = check_ticker(stock_ticker)
        for c in agent_classes:
            check_id(c.agent_type, "agent_type")
            check_version(c.version)
        analysis_id = str(uuid.uuid4())
        agents = [
            {
                "agent_type": c.agent_type,
                "agent_id": BaseAgent.new_agent_id(c.agent_type),
                "cls": f"{c.__module__}:{c.__qualname__}",
                "version": c.version,
                "config": dict(config or {}),
            }
            for c in agent_classes
        ]
        self.analyses.create(analysis_id, stock_ticker, agents, preserve)
        return analysis_id

    def using(self, market: MarketDataClient | None = None) -> LeadCoordinator:
        """A coordinator on the same collaborators with its own market client, counters
        and hooks."""
        twin = copy.copy(self)
        twin.market = market or MarketDataClient()
        twin.subtask_starts, twin.reexecuted = Counter(), 0
        twin.on_progress = twin.on_subtask_start = None
        return twin

    # -- building agents ----------------------------------------------------------------
    def prepare_agents(
        self, record: AnalysisRecord, runner: str | None = None
    ) -> tuple[list[BaseAgent], dict[str, RecoveryReport]]:
        """The analysis's agents, each with its working memory recovered (and guarded)
        and continued from the newest committed checkpoint.

        Call it holding the analysis's runner lock.
        """
        runner = runner or runner_id()
        agents: list[BaseAgent] = []
        reports: dict[str, RecoveryReport] = {}
        for entry in record.agents:
            cls = _resolve(entry)
            memory = self.memory(entry["agent_id"])
            agent = cls(
                record.analysis_id, record.stock_ticker, memory, self.market, entry.get("config")
            )
            agent.runner = runner
            reports[agent.agent_type] = self._recover(agent)
            try:
                restored = self.checkpointer.restore_checkpoint(
                    record.analysis_id, cls.agent_type, cls.version, agent.agent_id
                )
                agent.apply_checkpoint(restored.checkpoint, restored.head_seq)
            except CheckpointNotFound:
                pass
            agents.append(agent)
        return agents, reports

    def _recover(self, agent: BaseAgent) -> RecoveryReport:
        report = self.recovery.recover_agent_state(
            agent.agent_id, agent.analysis_id, agent.agent_type
        )
        agent.l1_cache.guard(report.epoch)
        return report

    # -- running ------------------------------------------------------------------------
    def run(self, analysis_id: object) -> dict[str, AgentResult]:
        """Run a ``running`` analysis's pending subtasks here; returns a result per agent type.

        Holds the runner lock for the run (``AnalysisBusy`` if a live process holds it).
        An agent that meets a quota pauses the analysis (``quota_exhausted``); a pause
        asked for elsewhere is honoured at the next subtask boundary. When every agent
        has completed, the analysis is completed and its checkpoints purged (unless
        preserved).
        """
        aid = check_uuid(analysis_id)
        with self.analyses.runner_lock(aid):
            record = self.analyses.get(aid)
            if record.status != "running":
                raise AnalysisStateError(
                    f"analysis is {record.status}; only a running analysis can be run",
                    analysis_id=aid,
                    status=record.status,
                )
            agents, _ = self.prepare_agents(record)
            return self.run_prepared(aid, agents)

    def run_prepared(self, analysis_id: str, agents: list[BaseAgent]) -> dict[str, AgentResult]:
        """Run agents built by :meth:`prepare_agents`, holding the runner lock."""
        try:
            return self._run_agents(analysis_id, agents)
        finally:
            for agent in agents:
                self.release(agent.agent_id)

    def _run_agents(self, aid: str, agents: list[BaseAgent]) -> dict[str, AgentResult]:
        results: dict[str, AgentResult] = {}
        stops: dict[str, Stop] = {}
        for agent in agents:
            result, stop = self._run_agent(agent)
            results[agent.agent_type] = result
            if stop is not None:
                stops[agent.agent_type] = stop
            if result.status == "quota_exhausted":
                self._pause_here(aid, "quota_exhausted", agent.agent_type)
                self.freeze(aid, agents, stops)
                return results
            if result.status == "paused":
                self.freeze(aid, agents, stops)
                return results
            if result.status == "failed":
                self.analyses.transition(aid, "failed", ("running",))
                return results
        try:
            self.analyses.transition(aid, "completed", ("running",))
        except AnalysisStateError as exc:
            if exc.context.get("status") != "paused":
                raise
            self.freeze(aid, agents, stops)  # paused as the last subtask ended
            return results
        self.retention.purge(aid)
        return results

    def _pause_here(self, aid: str, reason: str, by: str) -> None:
        """The runner pauses its own analysis (unless a pause was asked for meanwhile)."""
        try:
            self.analyses.transition(aid, "paused", ("running",))
        except AnalysisStateError as exc:
            if exc.context.get("status") != "paused":
                raise
            return
        self.analyses.record_pause(aid, reason, by)

    def _run_agent(self, agent: BaseAgent) -> tuple[AgentResult, Stop | None]:
        cp = self.checkpointer
        retries_left = self.settings.max_retries
        recoveries = 0
        while (name := agent.next_subtask()) is not None:
            if self.analyses.get(agent.analysis_id).status != "running":
                return self._result(agent, "paused"), None  # paused by someone else
            if name in agent.completed_subtasks:
                self.reexecuted += 1
            self.subtask_starts[(agent.analysis_id, agent.agent_type, name)] += 1
            if self.on_subtask_start is not None:
                self.on_subtask_start(agent, name)
            try:
                deliverable = agent.run_subtask(name)
                agent.complete(name, deliverable)
                try:
                    cp.save_checkpoint(agent, name)
                except BaseException:
                    agent.uncomplete(name)  # not checkpointed: not done
                    raise
            except MemoryLost as exc:
                recoveries += 1
                if recoveries > LOSS_RECOVERIES:
                    raise
                log.warning(
                    "%s lost its working memory in %s; recovering: %s", agent.agent_id, name, exc
                )
                self._recover(agent)
                continue
            except QuotaExceeded as exc:
                stop = Stop("quota_exhausted", str(exc), {"subtask": name, **_describe(exc)})
                return self._result(agent, "quota_exhausted", str(exc)), stop
            except STORAGE_ERRORS:
                raise  # the run stops; its checkpoints stay, and a resume continues it
            except Exception as exc:
                retries_left = self._retry(agent, name, exc, retries_left)
                if retries_left < 0:
                    return self._fail(agent, name, exc)
                continue
            recoveries = 0
            if self.on_progress is not None:
                self.on_progress(agent)
            retries_left = self.settings.max_retries
        return self._result(agent, "completed"), None

    @staticmethod
    def _retry(agent: BaseAgent, name: str, exc: BaseException, retries_left: int) -> int:
        agent.retry_count += 1
        log.warning(
            "%s subtask %s failed (%s retries left): %s", agent.agent_id, name, retries_left, exc
        )
        return retries_left - 1

    def _fail(
        self, agent: BaseAgent, name: str, exc: BaseException
    ) -> tuple[AgentResult, Stop | None]:
        self.checkpointer.save_checkpoint(
            agent,
            None,
            failure_reason=f"{type(exc).__name__}: {exc}",
            error_details={"subtask": name, **_describe(exc)},
        )
        return self._result(agent, "failed", str(exc)), None

    # -- pausing ------------------------------------------------------------------------
    def freeze(
        self, aid: str, agents: list[BaseAgent], stops: dict[str, Stop] | None = None
    ) -> list[dict[str, Any]]:
        """Write every agent's pause checkpoint (with its L1 snapshot in PostgreSQL too),
        give its keys the paused TTL, and record them in the open pause.

        Call it holding the runner lock. A memory found lost is recovered first, so an
        empty memory is never stored over a good snapshot.
        """
        stops = stops or {}
        states = []
        for agent in agents:
            stop = stops.get(agent.agent_type)
            for attempt in range(2):
                try:
                    cp = self.checkpointer.save_checkpoint(
                        agent,
                        None,
                        failure_reason=stop.status if stop else None,
                        error_details=stop.details if stop else None,
                        dual_write=True,
                    )
                    break
                except MemoryLost:
                    if attempt:
                        raise
                    self._recover(agent)
            keys = self.ttl_manager.extend_ttl_on_pause(agent.agent_id)
            self.checkpointer.extend_backup_ttl(agent.agent_id, self.settings.paused_ttl)
            states.append(
                {
                    "agent_type": agent.agent_type,
                    "agent_id": agent.agent_id,
                    "checkpoint_id": cp.checkpoint_id,
                    "seq": cp.seq,
                    "completed": len(cp.completed_subtasks),
                    "total": len(agent.subtasks),
                    "next_subtask": cp.current_subtask,
                    "l1_keys": keys,
                    "l1_snapshot_hash": cp.l1_snapshot_hash,
                }
            )
        self.analyses.freeze_pause(aid, states)
        log.info("froze %s: %d agents", aid, len(states))
        return states

    @staticmethod
    def _result(agent: BaseAgent, status: str, error: str | None = None) -> AgentResult:
        return AgentResult(
            agent.agent_type,
            agent.agent_id,
            status,
            list(agent.completed_subtasks),
            len(agent.subtasks),
            agent.retry_count,
            agent.get_interim_results(),
            error,
        )


def _describe(exc: BaseException) -> dict[str, Any]:
    details: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, AmberError):
        details.update({k: str(v) for k, v in exc.context.items()})
    return details
