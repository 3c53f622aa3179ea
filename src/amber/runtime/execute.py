"""How one run executes its agents' steps: record each result once, under a checkpoint.

``RunControl`` says when a run must stop at its next step (a pause asked for elsewhere,
a lease lost, a worker shutting down, another agent of the analysis stopping).
``StepExecutor`` is the run's ``StepRunner``: a completed step returns its recorded
result; a new one is tried under its retry policy, then recorded by a checkpoint
(compare-and-set, fenced by the lease) before its result is returned.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson

from amber import codec, defaults
from amber.agents.base import BaseAgent
from amber.errors import (
    AmberError,
    AnalysisStateError,
    AwaitingReview,
    CheckpointConflict,
    CodeChanged,
    ConsistencyError,
    Fenced,
    InvalidValue,
    QuotaExceeded,
    ReviewAlreadyDecided,
    StepFailed,
    StepInDoubt,
    StepMismatch,
    StoreUnavailable,
)
from amber.runtime.reviews import Decision, Reviews, deadline_at
from amber.runtime.steps import (
    IDEMPOTENCY_KEY,
    Intent,
    Retry,
    StepIntents,
    check_step_key,
    fn_name,
    takes_idempotency_key,
)

if TYPE_CHECKING:
    from amber.checkpoints.store import AgentCheckpointer
    from amber.runtime.leases import Leases

log = logging.getLogger("amber.steps")

STORAGE_ERRORS = (
    StoreUnavailable,
    CheckpointConflict,
    ConsistencyError,
    AnalysisStateError,
    Fenced,
)
"""Errors that stop a run instead of counting as the step's failure."""


class RunStopped(AmberError):
    """The run must stop at this step boundary; ``reason`` says why (``paused``,
    ``stopped`` or ``released``)."""


NOT_RETRIED: tuple[type[BaseException], ...] = (
    *STORAGE_ERRORS,
    InvalidValue,
    QuotaExceeded,
    AwaitingReview,
    StepInDoubt,
    StepFailed,
    StepMismatch,
    CodeChanged,
    RunStopped,
)
"""A step that raises one of these is not retried: the error says what the run does."""

REVIEW_FN = "amber:review"


class RunControl:
    """One run of one analysis: the lease it holds, and whether it must stop."""

    def __init__(
        self,
        owner: str,
        leases: Leases | None = None,
        shutdown: threading.Event | None = None,
        preserve: bool | None = None,
        token: int | None = None,
    ) -> None:
        self.owner = owner
        self.token = token
        """The run's fencing token (None: a run outside any lease, unfenced)."""
        self.leases = leases
        self.shutdown = shutdown
        self.preserve = preserve
        """Whether the analysis keeps its checkpoints after completing (None: ask)."""
        self.stop = threading.Event()
        """Set when one agent stops the analysis (quota, review, failure): the others
        stop at their next step."""

    def why_stop(self, agent: BaseAgent) -> str | None:
        """None to go on, else why the agent must stop before its next step."""
        if self.stop.is_set():
            return "stopped"
        if self.shutdown is not None and self.shutdown.is_set():
            return "released"
        if self.leases is not None:
            if self.leases.is_lost(self.owner):
                return "released"
            if self.leases.statuses.get(self.owner, "running") != "running":
                return "paused"
        if agent.run_status not in (None, "running"):
            return "paused"
        return None


def _own(value: Any) -> Any:
    """A recorded result as its caller gets it: a copy of its own, so that changing it
    changes neither the record nor what the step's key gives back next (a resumed run
    gets what the first run got)."""
    return (
        value
        if value is None or isinstance(value, str | int | float | bool)
        else (orjson.loads(orjson.dumps(value)))
    )


class StepExecutor:
    """Runs and records the steps of one run's agents (their ``steps_runner``)."""

    def __init__(
        self,
        checkpointer: AgentCheckpointer,
        intents: StepIntents,
        reviews: Reviews,
        control: RunControl,
        default_retry: Retry,
        on_progress: Callable[[BaseAgent], None] | None = None,
        starts: Counter[tuple[str, str, str]] | None = None,
    ) -> None:
        self.checkpointer = checkpointer
        self.intents = intents
        self.reviews = reviews
        self.control = control
        self.default_retry = default_retry
        self.on_progress = on_progress
        self.starts = starts if starts is not None else Counter()
        self._lock = threading.Lock()

    # -- steps ---------------------------------------------------------------------------
    def run_step(
        self,
        agent: BaseAgent,
        key: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: Retry | None,
        at_most_once: bool,
    ) -> Any:
        """The recorded result of step ``key``, or run ``fn`` and record its result."""
        key = check_step_key(key)
        name = fn_name(fn)
        if agent.has_completed(key):
            return self._recorded(agent, key, name)
        why = self.control.why_stop(agent)
        if why is not None:
            raise RunStopped(f"run stops before step {key!r}: {why}", reason=why)
        with self._lock:
            self.starts[(agent.analysis_id, agent.agent_type, key)] += 1
        intent: Intent | None = None
        if at_most_once:
            intent = self.intents.begin(
                agent.analysis_id, agent.agent_id, agent.agent_type, key, name, self.control.owner
            )
            if intent.status == "skip":
                return self._record(agent, key, name, intent.result, intent)
            in_doubt = intent.status in ("started", "done") and not intent.fresh
            if in_doubt and not takes_idempotency_key(fn):
                raise StepInDoubt(
                    f"step {key!r} of {agent.agent_type} started and never recorded a result;"
                    " it may have acted already and takes no idempotency key: decide with"
                    f" amber steps resolve {intent.step_id} --rerun | --skip",
                    step_id=intent.step_id,
                    analysis_id=agent.analysis_id,
                    step=key,
                )
            if takes_idempotency_key(fn):
                kwargs = {**kwargs, IDEMPOTENCY_KEY: intent.idempotency_key}
        blind = at_most_once and IDEMPOTENCY_KEY not in kwargs
        # an at-most-once call that raised may have acted: never called twice blindly
        policy = Retry(attempts=1) if blind else retry or self.default_retry
        value = self._attempt(agent, key, fn, args, kwargs, policy, blind)
        return self._record(agent, key, name, value, intent)

    def _attempt(
        self,
        agent: BaseAgent,
        key: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: Retry,
        blind: bool = False,
    ) -> Any:
        for attempt in range(1, policy.attempts + 1):
            # each retry only while the run still holds its lease as of a recent heartbeat
            # (the first try was checked by run_step, and an intent's statement is fenced):
            # a process that was frozen while its call failed finds out here
            why = self.control.why_stop(agent) if attempt > 1 else None
            if why is not None:
                raise RunStopped(f"run stops before retrying step {key!r}: {why}", reason=why)
            try:
                return fn(*args, **kwargs)
            except NOT_RETRIED:
                raise
            except Exception as exc:
                agent.retry_count += 1
                if attempt >= policy.attempts:
                    tries = (
                        "once (an at-most-once step without an idempotency key is never retried)"
                        if blind
                        else f"on all {policy.attempts} attempts"
                    )
                    raise StepFailed(
                        f"step {key!r} failed {tries}: {type(exc).__name__}: {exc}",
                        step=key,
                        attempts=policy.attempts,
                        agent_id=agent.agent_id,
                    ) from exc
                log.warning(
                    "%s step %s failed (attempt %d of %d): %s",
                    agent.agent_id,
                    key,
                    attempt,
                    policy.attempts,
                    exc,
                )
                time.sleep(policy.delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _recorded(self, agent: BaseAgent, key: str, name: str) -> Any:
        recorded = agent.step_functions.get(key)
        if recorded is not None and recorded != name:
            raise StepMismatch(
                f"step {key!r} was recorded by {recorded}, and is now called with {name}:"
                " give the new call its own key",
                step=key,
                agent_id=agent.agent_id,
            )
        return _own(agent.interim_results.get(key))

    def _record(
        self, agent: BaseAgent, key: str, name: str, value: Any, intent: Intent | None
    ) -> Any:
        try:  # the caller gets what a resumed run would get back: the JSON of it
            raw = codec.json_value(value, f"step {key!r}'s result", defaults.DOCUMENT_MAX_BYTES)
        except InvalidValue as exc:  # not stored, never retried: the agent fails with it
            raise InvalidValue(exc.message, step=key, agent_id=agent.agent_id) from None
        value = orjson.loads(raw)
        was_pending = agent.complete(key, value, name, raw)
        seq = agent.checkpoint_seq
        try:
            self.checkpointer.save_checkpoint(agent, key)
        except BaseException:
            if agent.checkpoint_seq == seq:  # not recorded: the step is not done
                agent.uncomplete(key, was_pending)
                raise
            # recorded, but its deferred memory writes are not in Redis (MemoryLost,
            # Fenced): the step is done, and its memory is recovered from that checkpoint
            with contextlib.suppress(AmberError):  # the save's error is the one to raise
                self._finished(intent)
            raise
        self._finished(intent)
        if self.on_progress is not None:
            with self._lock:
                self.on_progress(agent)
        return orjson.loads(raw)  # the caller's own: its changes are never the record

    def _finished(self, intent: Intent | None) -> None:
        if intent is not None and intent.status != "done":
            self.intents.finish(intent.step_id)

    # -- reviews -------------------------------------------------------------------------
    def wait_for_review(
        self,
        agent: BaseAgent,
        kind: str,
        payload: Any,
        deadline: datetime | timedelta | float | None,
        on_deadline: str,
        key: str | None,
    ) -> Decision:
        """The review's recorded decision; else open it and stop the run until decided."""
        step = check_step_key(key or f"review:{kind}")
        if agent.has_completed(step):
            return Decision.from_dict(self._recorded(agent, step, REVIEW_FN))
        why = self.control.why_stop(agent)
        if why is not None:
            raise RunStopped(f"run stops before review {step!r}: {why}", reason=why)
        codec.json_value(payload, "payload", defaults.DOCUMENT_MAX_BYTES)
        review = self.reviews.open(
            agent.analysis_id,
            agent.agent_id,
            agent.agent_type,
            step,
            kind,
            payload,
            deadline_at(deadline),
            on_deadline,
            self.control.owner,
        )
        if review.due(datetime.now(UTC)):
            try:
                review = self.reviews.expire(review.review_id)
            except ReviewAlreadyDecided:
                review = self.reviews.get(review.review_id)
        if review.status == "pending":
            raise AwaitingReview(
                f"{agent.agent_type} waits for review {review.review_id} ({kind})",
                review_id=review.review_id,
            )
        assert review.decision is not None
        self._record(agent, step, REVIEW_FN, review.decision, None)
        return Decision.from_dict(review.decision)
