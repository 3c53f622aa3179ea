"""``LeadCoordinator``: runs an analysis's agents subtask by subtask, checkpointing each."""

from __future__ import annotations

import importlib
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amber.agents.base import AGENT_TYPES, BaseAgent
from amber.agents.market import MarketDataClient
from amber.errors import AmberError, CheckpointNotFound, QuotaExceeded, StoreUnavailable
from amber.keys import check_id

if TYPE_CHECKING:
    from amber.engines.stack import Stack

log = logging.getLogger("amber.coordinator")


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


def _resolve(entry: dict[str, Any]) -> type[BaseAgent]:
    if entry["agent_type"] not in AGENT_TYPES:
        module, _, _ = str(entry["cls"]).partition(":")
        importlib.import_module(module)
    cls = AGENT_TYPES.get(entry["agent_type"])
    if cls is None:
        raise AmberError(
            f"no agent class registers agent_type {entry['agent_type']!r}",
            agent_type=entry["agent_type"],
        )
    return cls


OnStop = Callable[[str, AgentResult], None]


class LeadCoordinator:
    """Starts analyses, runs their agents, continues them from their checkpoints.

    ``market`` is shared by every agent it builds, so its ledger counts all calls.
    ``subtask_starts`` counts every ``run_subtask`` call by (analysis, agent type,
    subtask), and ``reexecuted`` counts starts of subtasks already checkpointed as
    done: the duplicate-work probe, which must stay 0.
    """

    def __init__(self, stack: Stack, market: MarketDataClient | None = None) -> None:
        self.stack = stack
        self.market = market or MarketDataClient()
        self.subtask_starts: Counter[tuple[str, str, str]] = Counter()
        self.reexecuted = 0
        self.on_quota: OnStop | None = None
        """Called with (analysis_id, result) when an agent stops on a quota; the pause
        manager sets it to pause the analysis."""
        self.on_progress: Callable[[BaseAgent], None] | None = None
        """Called after every checkpointed subtask (progress bars)."""

    def start_analysis(
        self,
        stock_ticker: str,
        agent_classes: Sequence[type[BaseAgent]],
        config: dict[str, Any] | None = None,
    ) -> str:
        """Register a new analysis of ``stock_ticker`` by these agents; returns its id."""
        check_id(stock_ticker, "stock_ticker")
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
        self.stack.analyses.create(analysis_id, stock_ticker, agents)
        return analysis_id

    def build_agents(self, analysis_id: str) -> list[BaseAgent]:
        """The analysis's agents, each continued from its latest checkpoint if it has one."""
        record = self.stack.analyses.get(analysis_id)
        agents = []
        for entry in record.agents:
            cls = _resolve(entry)
            agent = cls(
                record.analysis_id,
                record.stock_ticker,
                self.stack.memory(entry["agent_id"]),
                self.market,
                entry.get("config"),
            )
            try:
                restored = self.stack.checkpointer.restore_checkpoint(
                    record.analysis_id, cls.agent_type, version=cls.version
                )
                agent.apply_checkpoint(restored.checkpoint)
            except CheckpointNotFound:
                pass
            agents.append(agent)
        return agents

    def run(self, analysis_id: str) -> dict[str, AgentResult]:
        """Run every agent's pending subtasks; returns a result per agent type.

        On a quota error the agent stops with a failure checkpoint and ``on_quota``
        is called (the pause manager pauses the analysis there); without it the
        other agents go on and the analysis stays ``running``, to be run again. When
        every agent has completed, the analysis is completed and its checkpoints purged.
        """
        record = self.stack.analyses.get(analysis_id)
        if record.status != "running":
            self.stack.analyses.transition(analysis_id, "running", ("running",))  # raises
        with self.stack.analyses.runner_lock(record.analysis_id):
            return self._run_agents(record.analysis_id)

    def _run_agents(self, analysis_id: str) -> dict[str, AgentResult]:
        results: dict[str, AgentResult] = {}
        for agent in self.build_agents(analysis_id):
            result = self._run_agent(agent)
            results[agent.agent_type] = result
            if result.status == "quota_exhausted" and self.on_quota is not None:
                self.on_quota(analysis_id, result)
                return results
            if result.status == "paused":
                return results
            if result.status == "failed":
                self.stack.analyses.transition(analysis_id, "failed", ("running",))
                return results
        if all(r.status == "completed" for r in results.values()):
            self.stack.analyses.transition(analysis_id, "completed", ("running",))
            self.stack.retention.purge(analysis_id)
        return results

    def _run_agent(self, agent: BaseAgent) -> AgentResult:
        cp = self.stack.checkpointer
        retries_left = self.stack.settings.max_retries
        while (name := agent.next_subtask()) is not None:
            if self.stack.analyses.get(agent.analysis_id).status != "running":
                return self._result(agent, "paused")  # paused by someone else meanwhile
            probe = (agent.analysis_id, agent.agent_type, name)
            if name in agent.completed_subtasks:
                self.reexecuted += 1
            self.subtask_starts[probe] += 1
            try:
                deliverable = agent.run_subtask(name)
            except QuotaExceeded as exc:
                cp.save_checkpoint(
                    agent,
                    None,
                    failure_reason="quota_exhausted",
                    error_details={"subtask": name, **_describe(exc)},
                )
                return self._result(agent, "quota_exhausted", str(exc))
            except StoreUnavailable:
                raise
            except Exception as exc:
                agent.retry_count += 1
                log.warning(
                    "%s subtask %s failed (%s retries left): %s",
                    agent.agent_id,
                    name,
                    retries_left,
                    exc,
                )
                if retries_left > 0:
                    retries_left -= 1
                    continue
                cp.save_checkpoint(
                    agent,
                    None,
                    failure_reason=f"{type(exc).__name__}: {exc}",
                    error_details={"subtask": name, **_describe(exc)},
                )
                return self._result(agent, "failed", str(exc))
            agent.complete(name, deliverable)
            if self.stack.analyses.get(agent.analysis_id).status != "running":
                # paused while this subtask ran: keep its work as a pause would
                cp.save_checkpoint(agent, name, dual_write=True)
                self.stack.ttl_manager.extend_ttl_on_pause(
                    agent.agent_id,
                    [self.stack.keys.checkpoint(agent.analysis_id, agent.agent_type)],
                )
                return self._result(agent, "paused")
            cp.save_checkpoint(agent, name)
            if self.on_progress is not None:
                self.on_progress(agent)
            retries_left = self.stack.settings.max_retries
        return self._result(agent, "completed")

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
