"""``LeadCoordinator``: runs an analysis's agents step by step, checkpointing each step.

One run at a time runs an analysis: it holds the analysis's lease (``Analyses.runner_lock``
or a worker's claim), renewed by its process's heartbeat, and every checkpoint it writes
is fenced by that lease. Whoever holds it does every write of the analysis's checkpoints,
a pause's included, so a pause never races the step it stops: a pause requested from
elsewhere only flips the status, and the run freezes its agents at the next step.
Agents of one analysis run concurrently (``agent_concurrency``), each one's steps in order.
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from amber import codec, defaults, observe
from amber.agents.base import CLASSES, AgentRegistry, ApiClient, BaseAgent, current_agent
from amber.checkpoints.retention import Retention
from amber.checkpoints.store import AgentCheckpointer
from amber.config import Settings
from amber.errors import (
    AmberError,
    AnalysisStateError,
    AwaitingReview,
    InvalidValue,
    MemoryLost,
    MemoryRollbackRefused,
    QuotaExceeded,
    StepFailed,
    StepInDoubt,
)
from amber.keys import check_reason, check_ticker, check_uuid, runner_id
from amber.memory.recovery import DualRecoveryStrategy
from amber.memory.ttl import L1TTLManager
from amber.memory.working import AgentMemory
from amber.runtime.analyses import Analyses
from amber.runtime.execute import STORAGE_ERRORS, RunControl, RunStopped, StepExecutor
from amber.runtime.leases import Claim
from amber.runtime.preparing import AgentPreparer
from amber.runtime.results import AgentResult, Stop, counted_steps
from amber.runtime.reviews import Reviews
from amber.runtime.steps import Retry, StepIntents

if TYPE_CHECKING:
    import threading as _threading

log = logging.getLogger("amber.coordinator")

LOSS_RECOVERIES = 5
"""Times one subtask may recover lost working memory and start again before giving up."""

PAUSING = ("quota_exhausted", "step_in_doubt", "memory_lost")
"""Agent outcomes that pause the analysis, with that reason."""


OnAgent = Callable[[BaseAgent], None]
OnSubtask = Callable[[BaseAgent, str], None]


class LeadCoordinator(AgentPreparer):
    """Starts analyses, runs their agents, continues them from their checkpoints.

    ``market`` is shared by every agent it builds, so its ledger counts all calls.
    ``subtask_starts`` counts every step started by (analysis, agent type, step), and
    ``reexecuted`` counts starts of subtasks already checkpointed as done: the
    duplicate-work probe, which must stay 0.
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
        market: ApiClient | None = None,
        intents: StepIntents | None = None,
        reviews: Reviews | None = None,
        registry: AgentRegistry | None = None,
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
        self.market = market
        self.intents = intents or StepIntents(analyses.pg)
        self.reviews = reviews or Reviews(analyses.pg)
        self.registry: AgentRegistry = registry or CLASSES
        self.subtask_starts: Counter[tuple[str, str, str]] = Counter()
        self.reexecuted = 0
        self.on_progress: OnAgent | None = None
        """Called after every recorded step (progress bars)."""
        self.on_subtask_start: OnSubtask | None = None
        """Called with (agent, subtask) right before a subtask runs."""
        self._lock = threading.Lock()

    def start_analysis(
        self,
        stock_ticker: str,
        agent_classes: Sequence[type[BaseAgent]],
        config: dict[str, Any] | None = None,
        preserve: bool = False,
        input: dict[str, Any] | None = None,
        by: str = "amber",
    ) -> str:
        """Register (and queue) a new analysis of ``stock_ticker`` by these agents; its id.

        The seeds' door onto the one engine ``App.submit`` uses: the agents are stored
        by ``agent_type`` with the fingerprint of their subtasks, with the ``input`` every
        agent reads (``ctx.input``) and the submitter ``by`` on the ``submitted`` event.
        With ``preserve`` its checkpoints are kept after it completes.
        """
        stock_ticker = check_ticker(stock_ticker)
        agents = [c.entry(config) for c in agent_classes]
        doc = codec.json_object(input or {}, "input", defaults.DOCUMENT_MAX_BYTES)
        analysis_id = str(uuid.uuid4())
        self.analyses.create(
            analysis_id, stock_ticker, agents, preserve, None, doc, check_reason(by, "by")
        )
        return analysis_id

    def using(
        self, market: ApiClient | None = None, registry: AgentRegistry | None = None
    ) -> LeadCoordinator:
        """A coordinator on the same collaborators with its own market client, registry,
        counters and hooks."""
        twin = copy.copy(self)
        twin.market = market
        twin.registry = registry or self.registry
        twin.subtask_starts, twin.reexecuted = Counter(), 0
        twin.on_progress = twin.on_subtask_start = None
        twin._lock = threading.Lock()
        return twin

    # -- running ------------------------------------------------------------------------
    def run(
        self, analysis_id: object, shutdown: _threading.Event | None = None
    ) -> dict[str, AgentResult]:
        """Run a ``running`` analysis's pending steps here; returns a result per agent type.

        Leases the analysis for the run (``AnalysisBusy`` if a live run holds it). An
        agent that meets a quota pauses the analysis (``quota_exhausted``); one that
        waits for a review pauses it (``awaiting_review``); a pause asked for elsewhere
        is honoured at the next step. When every agent has completed, their results are
        kept, the analysis is completed and its checkpoints purged (unless preserved).
        """
        aid = check_uuid(analysis_id)
        with self.analyses.runner_lock(aid) as claim:
            return self.run_claimed(claim, shutdown)

    def run_claimed(
        self, claim: Claim, shutdown: _threading.Event | None = None
    ) -> dict[str, AgentResult]:
        """Run an analysis whose lease ``claim`` holds (the caller releases it)."""
        aid = claim.analysis_id
        record = self.analyses.record(claim.row) if claim.row else self.analyses.get(aid)
        if record.status != "running":
            raise AnalysisStateError(
                f"analysis is {record.status}; only a running analysis can be run",
                analysis_id=aid,
                status=record.status,
            )
        if not claim.noted:
            detail = {"taken_over_from": claim.prior} if claim.taken_over else {}
            self.analyses.event(
                aid, "taken_over" if claim.taken_over else "claimed", claim.owner, **detail
            )
        if claim.taken_over:
            observe.emit(observe.TAKEOVER)
        try:
            agents, _ = self.prepare_agents(
                record, claim.owner, heads=claim.heads, token=claim.token
            )
        except MemoryRollbackRefused as exc:
            self._pause_here(aid, "memory_lost", claim.owner, claim.owner)
            self.analyses.pause_failed(aid, str(exc))
            for entry in record.agents:
                self.release(entry["agent_id"])
            return {}
        control = RunControl(
            claim.owner, self.analyses.leases, shutdown, record.preserve, claim.token
        )
        return self.run_prepared(aid, agents, control)

    def run_prepared(
        self, analysis_id: str, agents: list[BaseAgent], control: RunControl | None = None
    ) -> dict[str, AgentResult]:
        """Run agents built by :meth:`prepare_agents`, holding the analysis's lease."""
        if control is None:
            owner = agents[0].runner if agents else runner_id()
            token = agents[0].l1_cache.token if agents else None
            control = RunControl(owner, self.analyses.leases, token=token)
        executor = StepExecutor(
            self.checkpointer,
            self.intents,
            self.reviews,
            control,
            Retry(attempts=self.settings.max_retries + 1),
            self._progress,
            self.subtask_starts,
        )
        try:
            for agent in agents:
                agent.steps_runner = executor
            return self._run_agents(analysis_id, agents, control)
        finally:
            for agent in agents:
                agent.steps_runner = None
                self.release(agent.agent_id)

    def _progress(self, agent: BaseAgent) -> None:
        if self.on_progress is not None:
            self.on_progress(agent)

    def _run_agents(
        self, aid: str, agents: list[BaseAgent], control: RunControl
    ) -> dict[str, AgentResult]:
        outcomes = self._run_all(agents, control)
        results = {a.agent_type: outcomes[a.agent_type][0] for a in agents}
        stops = {t: stop for t, (_, stop) in outcomes.items() if stop is not None}
        statuses = {r.status for r in results.values()}
        if "failed" in statuses:
            return self._failed(aid, agents, results, control)
        for reason in PAUSING:
            if reason in statuses:
                agent_type = next(t for t, r in results.items() if r.status == reason)
                self._pause_here(aid, reason, agent_type, self._fence_owner(control))
                self.freeze(aid, agents, stops)
                return results
        if "awaiting_review" in statuses:
            by = next(t for t, r in results.items() if r.status == "awaiting_review")
            if not self.reviews.pause_for(aid, by):  # decided meanwhile: go on
                control.stop.clear()
                return self._run_agents(aid, agents, control)
            self.freeze(aid, agents, stops)
            return results
        if statuses & {"paused", "stopped"}:
            self.freeze(aid, agents, stops)
            return results
        if "released" in statuses:
            if control.token is None:
                self.analyses.event(aid, "released", control.owner)
            else:  # not after another run took it over, nor after it ended
                self.analyses.run_event(aid, "released", control.owner)
            return results  # still running: the next claimer continues it
        rows = [
            (a.agent_id, a.agent_type, "completed", a.result(), list(a.completed_subtasks))
            for a in agents
        ]
        preserve = control.preserve
        if preserve is None:
            preserve = self.analyses.get(aid).preserve
        try:
            self.analyses.finish(
                aid,
                "completed",
                rows,
                control.owner,
                purge=not preserve,
                owner=self._fence_owner(control),
            )
        except AnalysisStateError as exc:
            if exc.context.get("status") != "paused":
                raise
            self.freeze(aid, agents, stops)  # paused as the last step ended
            return results
        except InvalidValue as exc:  # a result PostgreSQL cannot hold: the analysis fails
            for r in results.values():
                r.status, r.error = "failed", exc.message
            return self._failed(aid, agents, results, control)
        if not preserve:
            self.retention.drop_copies([a.agent_id for a in agents])
        return results

    def _run_all(
        self, agents: list[BaseAgent], control: RunControl
    ) -> dict[str, tuple[AgentResult, Stop | None]]:
        width = min(self.settings.agent_concurrency, len(agents))
        if width <= 1:
            return {a.agent_type: self._run_agent(a, control) for a in agents}
        with ThreadPoolExecutor(width, thread_name_prefix="amber-agent") as pool:
            futures = {a.agent_type: pool.submit(self._run_agent, a, control) for a in agents}
        errors = [f.exception() for f in futures.values() if f.exception() is not None]
        if errors:
            raise errors[0]  # type: ignore[misc]
        return {t: f.result() for t, f in futures.items()}

    @staticmethod
    def _fence_owner(control: RunControl) -> str | None:
        """The owner whose lease fences the run's statements (None: a run outside any)."""
        return control.owner if control.token is not None else None

    def _failed(
        self,
        aid: str,
        agents: list[BaseAgent],
        results: dict[str, AgentResult],
        control: RunControl,
    ) -> dict[str, AgentResult]:
        rows = [
            (a.agent_id, a.agent_type, "failed", {"error": r.error}, list(a.completed_subtasks))
            for a in agents
            if (r := results[a.agent_type]).status == "failed"
        ]
        errors = {t: r.error for t, r in results.items() if r.status == "failed"}
        self.analyses.finish(
            aid, "failed", rows, None, owner=self._fence_owner(control), errors=errors
        )
        return results

    def _pause_here(self, aid: str, reason: str, by: str, owner: str | None = None) -> None:
        """The runner pauses its own analysis (unless a pause was asked for meanwhile);
        with ``owner``, only while that run holds the lease (``Fenced`` otherwise)."""
        try:
            self.analyses.transition(aid, "paused", ("running",), owner)
        except AnalysisStateError as exc:
            if exc.context.get("status") != "paused":
                raise
            return
        self.analyses.record_pause(aid, reason, by)
        self.analyses.event(aid, "paused", by, reason=reason)
        observe.emit(observe.PAUSE, reason=reason)

    def _run_agent(self, agent: BaseAgent, control: RunControl) -> tuple[AgentResult, Stop | None]:
        token = current_agent.set(agent)
        try:
            return self._steps(agent, control)
        except BaseException:
            control.stop.set()  # the others stop at their next step
            raise
        finally:
            current_agent.reset(token)

    def _steps(self, agent: BaseAgent, control: RunControl) -> tuple[AgentResult, Stop | None]:
        recoveries = 0
        while (name := agent.next_subtask()) is not None:
            why = control.why_stop(agent)
            if why is not None:
                return self._result(agent, why), None
            with self._lock:
                if agent.has_completed(name):
                    self.reexecuted += 1
                if self.on_subtask_start is not None:
                    self.on_subtask_start(agent, name)
            try:
                agent.step(name, agent.run_subtask, name)
            except MemoryLost as exc:
                recoveries += 1
                if recoveries > LOSS_RECOVERIES:
                    raise
                log.warning(
                    "%s lost its working memory in %s; recovering: %s", agent.agent_id, name, exc
                )
                try:
                    self._recover(agent)
                except MemoryRollbackRefused as refused:
                    control.stop.set()
                    stop = Stop(
                        "memory_lost", str(refused), {"subtask": name, **_describe(refused)}
                    )
                    return self._result(agent, "memory_lost", str(refused)), stop
                continue
            except RunStopped as exc:
                return self._result(agent, str(exc.context.get("reason"))), None
            except QuotaExceeded as exc:
                control.stop.set()
                stop = Stop("quota_exhausted", str(exc), {"subtask": name, **_describe(exc)})
                return self._result(agent, "quota_exhausted", str(exc)), stop
            except (AwaitingReview, StepInDoubt) as exc:
                control.stop.set()
                status = "awaiting_review" if isinstance(exc, AwaitingReview) else "step_in_doubt"
                stop = Stop(status, str(exc), {"subtask": name, **_describe(exc)})
                return self._result(agent, status, str(exc)), stop
            except STORAGE_ERRORS:
                raise  # the run stops; its checkpoints stay, and a resume continues it
            except Exception as exc:  # a step out of attempts, a mismatch, a bad result
                control.stop.set()
                return self._fail(agent, name, exc)
            recoveries = 0
        return self._result(agent, "completed"), None

    def _fail(
        self, agent: BaseAgent, name: str, exc: BaseException
    ) -> tuple[AgentResult, Stop | None]:
        cause = exc.__cause__ if isinstance(exc, StepFailed) and exc.__cause__ else exc
        self.checkpointer.save_checkpoint(  # the step's own error is what it records
            agent,
            None,
            failure_reason=f"{type(cause).__name__}: {cause}",
            error_details={"subtask": name, **_describe(cause)},
        )
        return self._result(agent, "failed", str(exc)), None

    # -- pausing ------------------------------------------------------------------------
    def freeze(
        self, aid: str, agents: list[BaseAgent], stops: dict[str, Stop] | None = None
    ) -> list[dict[str, Any]]:
        """Write every agent's pause checkpoint (with its L1 snapshot in PostgreSQL too),
        give its keys the paused TTL, and record them in the open pause.

        Call it holding the lease. A memory found lost is recovered first, so an empty
        memory is never stored over a good snapshot.
        """
        stops = stops or {}
        states = []
        for agent in agents:
            stop = stops.get(agent.agent_type)
            if stop is not None and stop.status == "memory_lost":
                # its newest checkpoint stays the one to continue from: nothing lost is stored
                states.append(
                    {
                        "agent_type": agent.agent_type,
                        "agent_id": agent.agent_id,
                        "seq": agent.checkpoint_seq,
                        "memory_lost": stop.error,
                    }
                )
                continue
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
                    "completed": len(counted_steps(cp.completed_subtasks)),
                    "total": _total(agent),
                    "word": "steps" if agent.dynamic else "subtasks",
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
        done = agent.done_subtasks()
        return AgentResult(
            agent.agent_type,
            agent.agent_id,
            status,
            done,
            _total(agent),
            agent.retry_count,
            agent.get_interim_results(),
            error,
            "steps" if agent.dynamic else "subtasks",
        )


def _total(agent: BaseAgent) -> int:
    """How many steps (subtasks) the agent has, as a person counts them: a class agent's
    declared subtasks; a function agent's steps done and declared still to come (its
    result is not one of them)."""
    if not agent.dynamic:
        return len(agent.subtasks)
    return len(counted_steps(agent.done_subtasks())) + len(counted_steps(agent.pending_subtasks))


def _describe(exc: BaseException) -> dict[str, Any]:
    details: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, AmberError):
        details.update({k: str(v) for k, v in exc.context.items()})
    return details
