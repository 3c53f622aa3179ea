"""``BaseAgent``: an agent made of durable steps; by default, ordered subtasks, each ending
in a storable deliverable."""

from __future__ import annotations

import contextvars
import hashlib
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import orjson

from amber import codec, defaults, observe
from amber.checkpoints.growing import GrowingDict, GrowingFields, GrowingList
from amber.checkpoints.model import Checkpoint
from amber.errors import AmberError, RegistrationError, UnknownAgent
from amber.keys import call_key, check_id, check_version
from amber.memory.recovery import MemoryMark
from amber.memory.working import AgentMemory

if TYPE_CHECKING:
    from amber.runtime.reviews import Decision
    from amber.runtime.steps import Retry

current_agent: contextvars.ContextVar[BaseAgent | None] = contextvars.ContextVar(
    "amber_current_agent", default=None
)
"""The agent whose steps run in this thread (set by the coordinator): ``@app.step``
functions find it here."""


class ApiClient(Protocol):
    """An external API an agent calls through :meth:`BaseAgent.fetch`."""

    def fetch(self, provider: str, endpoint: str, **params: Any) -> Any:
        """One call; its response must be JSON-able."""
        ...


class StepRunner(Protocol):
    """What runs an agent's steps durably (the coordinator)."""

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
        """Return step ``key``'s recorded result, or run ``fn`` and record its result."""
        ...

    def wait_for_review(
        self,
        agent: BaseAgent,
        kind: str,
        payload: Any,
        deadline: datetime | timedelta | float | None,
        on_deadline: str,
        key: str | None,
    ) -> Decision:
        """The review's decision, or pause the analysis until there is one."""
        ...


class BaseAgent:
    """Subclass, set ``agent_type``, ``version`` and ``subtasks``, implement ``run_subtask``.

    Each subtask is a durable step: ``run_subtask(name)`` returns the subtask's
    deliverable (JSON-able), which is stored in ``interim_results[name]`` and
    checkpointed; a resumed agent never runs a completed subtask again. Inside a
    subtask, ``self.step(key, fn, ...)`` makes any call durable the same way. Use
    ``self.l1_cache`` (also ``self.memory``) for working memory and ``self.fetch`` for
    API calls, which caches each response in working memory.
    """

    agent_type: ClassVar[str] = ""
    version: ClassVar[str] = "1.0"
    subtasks: ClassVar[tuple[str, ...]] = ()
    dynamic: ClassVar[bool] = False
    """Steps are found as the code runs (a function agent), not declared in ``subtasks``."""
    declared_steps: ClassVar[tuple[str, ...]] = ()
    """For a dynamic agent, the steps it declares (part of its fingerprint)."""
    kept_fields: ClassVar[tuple[str, ...]] = ("completed_subtasks", "step_functions")
    """Record fields whose encoding is kept from one save to the next (``GrowingFields``):
    those only amber changes. A class agent's subtasks read ``interim_results`` and may
    change what they find there, so its results are encoded whole at every save."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.agent_type:
            check_id(cls.agent_type, "agent_type")
            if not cls.dynamic:
                CLASSES.add(cls.agent_type, cls, replace=True)

    @classmethod
    def steps_declared(cls) -> list[str]:
        """The steps this code declares: its subtasks (or a dynamic agent's declaration)."""
        return list(cls.declared_steps if cls.dynamic else cls.subtasks)

    @classmethod
    def fingerprint(cls) -> str:
        """A digest of the version and the declared steps: what a resume compares."""
        doc = orjson.dumps({"version": cls.version, "steps": cls.steps_declared()})
        return hashlib.sha256(doc).hexdigest()[:16]

    def __init__(
        self,
        analysis_id: str,
        stock_ticker: str,
        l1_cache: AgentMemory,
        market: ApiClient | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        if not self.subtasks and not self.dynamic:
            raise AmberError(f"{type(self).__name__} declares no subtasks")
        self.analysis_id = str(analysis_id)
        self.stock_ticker = stock_ticker
        self.l1_cache = l1_cache
        self.agent_id = l1_cache.agent_id
        self.market = market
        self.config: dict[str, Any] = dict(config or {})
        self.completed_subtasks: list[str] = GrowingList()
        self.pending_subtasks: list[str] = list(self.subtasks)
        self.retry_count = 0
        self.interim_results: dict[str, Any] = GrowingDict()
        self.executions: dict[str, int] = {}
        """How many times each subtask was started in this process (duplicate-work probe)."""
        self.checkpoint_seq = 0
        """Sequence of the newest checkpoint this agent continues from (0: none yet)."""
        self.checkpoint_l1_keys = 0
        """Keys in that checkpoint's working-memory snapshot."""
        self.checkpoint_l1: MemoryMark | None = None
        """Which memory that checkpoint was taken with (None: none yet, or not recorded)."""
        self.runner = ""
        """The run this agent belongs to (``host:pid:token``); written into its checkpoints."""
        self.step_functions: dict[str, str] = GrowingDict()
        """The function each completed step ran, by key (``module:qualname``)."""
        self.encoded = GrowingFields(type(self).kept_fields)
        """The encoded bytes of the record's growing fields, as the last save made them."""
        self._done: tuple[object, int, set[str]] = (None, 0, set())
        self.run_status: str | None = None
        """The analysis's status as of the last checkpoint (set by the checkpointer)."""
        self.input: dict[str, Any] = {}
        """What the analysis was submitted with."""
        self.steps_runner: StepRunner | None = None
        """Set by the coordinator that runs this agent; None: steps just call through."""

    @property
    def memory(self) -> AgentMemory:
        """This agent's working memory (the same as ``l1_cache``)."""
        return self.l1_cache

    @classmethod
    def entry(cls, config: dict[str, Any] | None = None) -> dict[str, Any]:
        """How an analysis stores this agent: its registry name, a fresh id, version,
        config and the fingerprint of its declared steps."""
        check_id(cls.agent_type, "agent_type")
        check_version(cls.version)
        return {
            "agent_type": cls.agent_type,
            "agent_id": cls.new_agent_id(cls.agent_type),
            "version": cls.version,
            "config": codec.json_object(config or {}, "config", defaults.DOCUMENT_MAX_BYTES),
            "steps": cls.steps_declared(),
            "fingerprint": cls.fingerprint(),
        }

    @staticmethod
    def new_agent_id(agent_type: str) -> str:
        """A fresh agent id for ``agent_type``."""
        return f"{agent_type}_{uuid.uuid4().hex[:12]}"

    # -- DD-011's view of progress --------------------------------------------------------
    def calculate_progress(self) -> float:
        """Percentage of declared subtasks completed (steps inside them do not count)."""
        done = len(self.done_subtasks())
        total = done + len(self.pending_subtasks)
        return 100.0 * done / total if total else 100.0

    def done_subtasks(self) -> list[str]:
        """The declared subtasks completed, in order (a dynamic agent: every step)."""
        if self.dynamic:
            return list(self.completed_subtasks)
        declared = set(self.subtasks)
        return [s for s in self.completed_subtasks if s in declared]

    def next_subtask(self) -> str | None:
        """The subtask that runs next, or None when done."""
        return self.pending_subtasks[0] if self.pending_subtasks else None

    def get_interim_results(self) -> dict[str, Any]:
        """Deliverables so far, by subtask."""
        return dict(self.interim_results)

    def set_interim_results(self, results: dict[str, Any]) -> None:
        """Replace the deliverables (on restore)."""
        self.interim_results = GrowingDict(results)

    def has_completed(self, subtask: str) -> bool:
        """Whether ``subtask`` (or a step of that key) is completed: in constant time while
        the completed list is amber's own."""
        keys = self._completed_keys()
        return subtask in (self.completed_subtasks if keys is None else keys)

    def _completed_keys(self) -> set[str] | None:
        """The completed keys as a set, current with the list (None: the list is the
        agent's own, which counts no changes, and is scanned)."""
        steps = self.completed_subtasks
        if not isinstance(steps, GrowingList):
            return None
        done, changes, keys = self._done
        if done is not steps or changes != steps.changes:
            keys = set(steps)
            self._done = (steps, steps.changes, keys)
        return keys

    def complete(
        self, subtask: str, deliverable: Any, fn: str | None = None, raw: bytes | None = None
    ) -> bool:
        """Record a finished subtask (or step), its result (``raw``: its JSON, when the
        caller has it) and the function that made it (``fn``); whether it was pending."""
        keys = self._completed_keys()
        name = orjson.dumps(subtask)
        self.interim_results[subtask] = deliverable
        if "interim_results" in self.encoded.names:
            value = raw if raw is not None else orjson.dumps(deliverable)
            self.encoded.added(self, "interim_results", name + b":" + value)
        was_pending = subtask in self.pending_subtasks
        if was_pending:
            self.pending_subtasks.remove(subtask)
        steps = self.completed_subtasks
        steps.append(subtask)
        if keys is not None and isinstance(steps, GrowingList):  # current before the append
            keys.add(subtask)
            self._done = (steps, steps.changes, keys)
        self.encoded.added(self, "completed_subtasks", name)
        if fn is not None:
            self.step_functions[subtask] = fn
            self.encoded.added(self, "step_functions", name + b":" + orjson.dumps(fn))
        return was_pending

    def uncomplete(self, subtask: str, was_pending: bool = True) -> None:
        """Undo :meth:`complete` (its checkpoint was not written): the subtask runs again."""
        self.interim_results.pop(subtask, None)
        self.step_functions.pop(subtask, None)
        self.completed_subtasks.remove(subtask)
        if was_pending:
            self.pending_subtasks.insert(0, subtask)

    def result(self) -> Any:
        """The agent's outcome, kept after completion: its deliverables by subtask."""
        return self.get_interim_results()

    def apply_checkpoint(self, cp: Checkpoint, head_seq: int | None = None) -> None:
        """Continue from ``cp``: completed subtasks are never run again.

        ``head_seq`` is the newest sequence PostgreSQL holds for the agent (above
        ``cp.seq`` only when newer rows were unreadable): the next checkpoint follows it.
        """
        self.checkpoint_seq = max(cp.seq, head_seq or 0)
        self.checkpoint_l1_keys = cp.l1_snapshot_keys or 0
        self.checkpoint_l1 = (
            MemoryMark(cp.l1_snapshot_seq or 0, cp.l1_snapshot_hash, cp.l1_snapshot_epoch)
            if cp.l1_snapshot_hash
            else None
        )
        self.completed_subtasks = GrowingList(cp.completed_subtasks)
        self.pending_subtasks = list(cp.pending_subtasks)
        self.retry_count = cp.retry_count
        self.config = dict(cp.agent_config)
        self.set_interim_results(cp.interim_results)
        self.step_functions = GrowingDict(cp.step_functions)

    def restart(self, head_seq: int) -> None:
        """Continue from the start, as if no checkpoint had been taken (every step runs
        again); the next checkpoint still follows ``head_seq``, the newest stored."""
        self.checkpoint_seq = head_seq
        self.checkpoint_l1_keys = 0
        self.checkpoint_l1 = None
        self.completed_subtasks = GrowingList()
        self.pending_subtasks = list(self.subtasks)
        self.interim_results = GrowingDict()
        self.step_functions = GrowingDict()
        self.retry_count = 0

    # -- work -----------------------------------------------------------------------------
    def run_subtask(self, name: str) -> Any:
        """Do one subtask and return its deliverable. Subclasses implement this."""
        raise NotImplementedError

    def step(
        self,
        key: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        at_most_once: bool = False,
        **kwargs: Any,
    ) -> Any:
        """``fn(*args, **kwargs)``, durable under ``key``: once its result is recorded, a
        resumed agent gets the recorded result (as JSON gives it back) and ``fn`` is not
        called again.

        ``retry`` (an ``amber.Retry``) sets attempts and backoff. ``at_most_once`` marks a
        call that touches the outside world: if a crash leaves it started but unrecorded,
        it is re-run only when ``fn`` takes ``idempotency_key=`` (amber passes the same
        key every time), otherwise held for a person (``amber steps in-doubt``). A key
        recorded by another function raises ``StepMismatch``. Outside a run, it just
        calls ``fn``.
        """
        if self.steps_runner is None:
            return fn(*args, **kwargs)
        with observe.span("amber.step", step=key, agent_type=self.agent_type):
            return self.steps_runner.run_step(self, key, fn, args, kwargs, retry, at_most_once)

    def wait_for_review(
        self,
        kind: str,
        payload: Any = None,
        *,
        deadline: datetime | timedelta | float | None = None,
        on_deadline: str = "reject",
        key: str | None = None,
    ) -> Decision:
        """Pause the analysis until a person decides (``amber reviews approve|reject``),
        then return the ``Decision``, exactly once: it is recorded as this step's result.

        ``deadline`` (seconds, a ``timedelta`` or an aware ``datetime``) decides it as
        ``on_deadline`` (``"approve"`` or ``"reject"``) when no one has by then. ``key``
        (default ``review:<kind>``) names the step.
        """
        if self.steps_runner is None:
            raise AmberError("wait_for_review needs a run: run the agent with amber")
        return self.steps_runner.wait_for_review(self, kind, payload, deadline, on_deadline, key)

    def fetch(self, provider: str, endpoint: str, **params: Any) -> Any:
        """An API call whose response is cached in working memory: never made twice."""
        key = "api_cache:" + call_key(provider, endpoint, params)
        cached = self.l1_cache.get(key)
        if cached is not None:
            return orjson.loads(cached)
        if self.market is None:
            raise AmberError(
                "this agent has no API client: give the coordinator (or stack) market=...",
                agent_id=self.agent_id,
            )
        response = self.market.fetch(provider, endpoint, **params)
        self.l1_cache.set(key, orjson.dumps(response))
        return response


class AgentRegistry:
    """Agent classes by the name stored with an analysis: where a worker finds the code of
    what it runs. The one registry type: each ``amber.App`` holds one, and ``CLASSES``
    (every ``BaseAgent`` subclass with an ``agent_type``, as it is defined) serves a
    coordinator used without an app (the seeds' ``stack.coordinator``)."""

    def __init__(self, app: str | None = None) -> None:
        self.app = app
        """The app's name; None for ``CLASSES``."""
        self.agents: dict[str, type[BaseAgent]] = {}

    def add(self, name: str, cls: type[BaseAgent], replace: bool = False) -> None:
        """Register ``cls`` as ``name``; another class under a taken name raises
        ``RegistrationError`` unless ``replace`` (a class defined again)."""
        if not replace and self.agents.get(name, cls) is not cls:
            raise RegistrationError(f"agent {name!r} is registered already", agent=name)
        self.agents[name] = cls

    def resolve(self, name: str) -> type[BaseAgent]:
        """The class registered as ``name``; ``UnknownAgent`` if none is (yet)."""
        cls = self.agents.get(name)
        if cls is not None:
            return cls
        if self.app is None:
            message = (
                f"no agent class registers agent_type {name!r}: import the module that"
                " defines it, or run with --app"
            )
        else:
            message = (
                f"agent {name!r} is not registered with app {self.app!r}"
                f" (it registers: {', '.join(sorted(self.agents)) or 'nothing'})"
            )
        raise UnknownAgent(message, agent_type=name)

    def names(self) -> list[str]:
        """Every registered name."""
        return sorted(self.agents)


CLASSES = AgentRegistry()
"""Every BaseAgent subclass with an ``agent_type``, registered when its class is defined."""

AGENT_TYPES = CLASSES.agents
"""``CLASSES``'s classes by agent type (the name earlier releases exported)."""
