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
import dataclasses
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from amber import observe
from amber.agents.base import ApiClient, BaseAgent, ClassRegistry, current_agent
from amber.checkpoints.retention import Retention
from amber.checkpoints.store import AgentCheckpointer
from amber.config import Settings
from amber.errors import (
    AmberError,
    AnalysisStateError,
    AwaitingReview,
    CheckpointNotFound,
    CodeChanged,
    InvalidValue,
    MemoryLost,
    MemoryRollbackRefused,
    QuotaExceeded,
    StepFailed,
    StepInDoubt,
    UnknownAgent,
    fenced,
)
from amber.keys import check_ticker, check_uuid, runner_id
from amber.memory.recovery import DualRecoveryStrategy, RecoveryReport
from amber.memory.ttl import L1TTLManager
from amber.memory.working import AgentMemory
from amber.runtime.analyses import Analyses, AnalysisRecord
from amber.runtime.execute import STORAGE_ERRORS, RunControl, RunStopped, StepExecutor
from amber.runtime.leases import Claim
from amber.runtime.reviews import Reviews
from amber.runtime.steps import Retry, StepIntents

if TYPE_CHECKING:
    import threading as _threading

log = logging.getLogger("amber.coordinator")

LOSS_RECOVERIES = 5
"""Times one subtask may recover lost working memory and start again before giving up."""

PAUSING = ("quota_exhausted", "step_in_doubt", "memory_lost")
"""Agent outcomes that pause the analysis, with that reason."""


class Registry(Protocol):
    """Where agent names stored with an analysis are resolved (an ``amber.App``)."""

    def resolve(self, name: str) -> type[BaseAgent]:
        """The agent class registered as ``name``; ``UnknownAgent`` if none."""
        ...

    def names(self) -> list[str]:
        """Every registered name."""
        ...


@dataclass
class AgentResult:
    """How one agent's run ended."""

    agent_type: str
    agent_id: str
    status: str
    """``completed``, ``failed``, ``quota_exhausted``, ``awaiting_review``,
    ``step_in_doubt``; or, stopped before its next step: ``paused`` (from elsewhere),
    ``stopped`` (another agent stopped the analysis), ``released`` (lease given up)."""
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


OnAgent = Callable[[BaseAgent], None]
OnSubtask = Callable[[BaseAgent, str], None]


class LeadCoordinator:
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
        registry: Registry | None = None,
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
        self.registry: Registry = registry or ClassRegistry()
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
    ) -> str:
        """Register (and queue) a new analysis of ``stock_ticker`` by these agents; its id.

        The agents are stored by ``agent_type`` with the fingerprint of their subtasks.
        With ``preserve`` its checkpoints are kept after it completes.
        """
        stock_ticker = check_ticker(stock_ticker)
        agents = [c.entry(config) for c in agent_classes]
        analysis_id = str(uuid.uuid4())
        self.analyses.create(analysis_id, stock_ticker, agents, preserve)
        return analysis_id

    def using(
        self, market: ApiClient | None = None, registry: Registry | None = None
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
                if name in agent.completed_subtasks:
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
        done = agent.done_subtasks()
        return AgentResult(
            agent.agent_type,
            agent.agent_id,
            status,
            done,
            len(done) + len(agent.pending_subtasks) if agent.dynamic else len(agent.subtasks),
            agent.retry_count,
            agent.get_interim_results(),
            error,
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


def _describe(exc: BaseException) -> dict[str, Any]:
    details: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, AmberError):
        details.update({k: str(v) for k, v in exc.context.items()})
    return details
