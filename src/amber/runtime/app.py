"""``amber.App``: the agents and analysis definitions of an application, by name.

Stored rows name registry entries, never import paths: a worker started with
``--app mypkg.agents:app`` runs what that app registers, and an analysis naming an agent
it does not know is left alone (queued for a worker that knows it).

    app = amber.App("research")

    @app.agent(version="1")
    def summarise(ctx):
        text = ctx.step("fetch", fetch_document, ctx.input["url"])
        return {"words": len(text.split())}

    app.analysis("brief", agents=[summarise])
"""

from __future__ import annotations

import hashlib
import importlib
import uuid
from collections.abc import Callable, Sequence
from functools import wraps
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast, overload

import orjson

from amber import codec, defaults
from amber.agents.base import AgentRegistry, ApiClient, BaseAgent, current_agent
from amber.errors import (
    AppNotFound,
    InvalidIdentifier,
    InvalidValue,
    RegistrationError,
    UnknownAgent,
)
from amber.keys import check_id, check_reason, check_ticker, check_version
from amber.memory.working import AgentMemory
from amber.runtime.results import RESULT_KEY

if TYPE_CHECKING:
    from amber.runtime.coordinator import LeadCoordinator
    from amber.runtime.pause import ResumeReport
    from amber.runtime.results import AgentResult
    from amber.runtime.steps import Retry
    from amber.runtime.worker import Worker
    from amber.stack import Stack


F = TypeVar("F", bound=Callable[..., Any])
A = TypeVar("A", bound=type[BaseAgent])


class FunctionAgent(BaseAgent):
    """An agent that is one function of a context: ``fn(ctx) -> result``.

    The context is the agent: ``ctx.step``, ``ctx.wait_for_review``, ``ctx.memory``,
    ``ctx.input``, ``ctx.analysis_id``, ``ctx.agent_id``. The return value is recorded as
    the final step, so a finished agent is never run again.
    """

    dynamic = True
    kept_fields = ("completed_subtasks", "interim_results", "step_functions")
    """A step's result is recorded as it was made: the function gets copies of it (from
    ``ctx.step``), so its encoding is kept from one save to the next too. The results
    themselves stay reachable as ``ctx.interim_results``: they are the record, to read,
    never to change in place (a change there may or may not reach the next checkpoint,
    and a resumed run's steps return what was recorded)."""
    fn: ClassVar[Callable[[Any], Any]]

    def __init__(
        self,
        analysis_id: str,
        stock_ticker: str,
        l1_cache: AgentMemory,
        market: ApiClient | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(analysis_id, stock_ticker, l1_cache, market, config)
        self.pending_subtasks = [RESULT_KEY]

    def restart(self, head_seq: int) -> None:
        """Continue from the start: the function runs again, every step with it."""
        super().restart(head_seq)
        self.pending_subtasks = [RESULT_KEY]

    def run_subtask(self, name: str) -> Any:
        """Run the function (its completed steps return their recorded results)."""
        return type(self).fn(self)

    def calculate_progress(self) -> float:
        """Declared steps done, as a percentage (100 once the function returned)."""
        if not self.pending_subtasks:
            return 100.0
        declared = self.declared_steps
        if not declared:
            return 0.0
        done = sum(1 for s in declared if s in self.interim_results)
        return 100.0 * done / (len(declared) + 1)

    def result(self) -> Any:
        """The function's return value."""
        return self.interim_results.get(RESULT_KEY)


class App:
    """Registers agents (classes or functions) and analysis definitions by name."""

    def __init__(self, name: str = "amber") -> None:
        self.name = check_id(name, "app name")
        self.registry = AgentRegistry(self.name)
        """The app's agents by name: what its workers resolve stored names in."""
        self.agents: dict[str, type[BaseAgent]] = self.registry.agents
        self.definitions: dict[str, tuple[str, ...]] = {}

    def __repr__(self) -> str:
        return f"App({self.name!r}, agents={sorted(self.agents)})"

    # -- registering ---------------------------------------------------------------------
    @overload
    def agent(self, target: A) -> A: ...
    @overload
    def agent(self, target: F) -> F: ...
    @overload
    def agent(
        self, *, name: str | None = None, version: str = "1.0", steps: Sequence[str] = ()
    ) -> Callable[[F], F]: ...

    def agent(
        self,
        target: Any = None,
        *,
        name: str | None = None,
        version: str = "1.0",
        steps: Sequence[str] = (),
    ) -> Any:
        """Register an agent: a ``BaseAgent`` subclass, or a function ``fn(ctx)``.

        As ``@app.agent`` or ``@app.agent(name=..., version=..., steps=[...])``; a
        function agent's ``version`` and declared ``steps`` make its fingerprint. A name
        registered twice raises ``RegistrationError``.
        """
        if target is None:
            return lambda t: self._register(t, name, version, steps)
        return self._register(target, name, version, steps)

    def _register(self, target: Any, name: str | None, version: str, steps: Sequence[str]) -> Any:
        if isinstance(target, type) and issubclass(target, BaseAgent):
            agent_name = target.agent_type
            if not agent_name or (name is not None and name != agent_name):
                raise RegistrationError(
                    f"{target.__name__} registers under its agent_type; set agent_type"
                    " (and give no other name)",
                    agent=target.__name__,
                )
            self._add(agent_name, target)
            return target
        if not callable(target) or isinstance(target, type):
            raise RegistrationError(
                "an agent is a BaseAgent subclass or a function of one argument (ctx)",
                agent=repr(target),
            )
        agent_name = str(name or getattr(target, "__name__", ""))
        try:
            check_id(agent_name, "agent name")
            check_version(version, "version")
            declared = tuple(check_id(s, "step") if ":" not in s else s for s in steps)
        except (InvalidValue, InvalidIdentifier) as exc:
            raise RegistrationError(exc.message, agent=agent_name) from None
        cls = type(
            f"FunctionAgent[{agent_name}]",
            (FunctionAgent,),
            {
                "agent_type": agent_name,
                "version": version,
                "declared_steps": declared,
                "fn": staticmethod(target),
                "__module__": getattr(target, "__module__", __name__),
            },
        )
        self._add(agent_name, cls)
        return target

    def _add(self, name: str, cls: type[BaseAgent]) -> None:
        self.registry.add(name, cls)

    def analysis(self, name: str, agents: Sequence[Any]) -> str:
        """Register an analysis definition: a name for a list of registered agents."""
        try:
            name = check_id(name, "analysis name")
        except (InvalidValue, InvalidIdentifier) as exc:
            raise RegistrationError(exc.message, analysis=name) from None
        if name in self.definitions:
            raise RegistrationError(f"analysis {name!r} is defined already", analysis=name)
        names = tuple(self.agent_name(a) for a in agents)
        if not names:
            raise RegistrationError("an analysis needs at least one agent", analysis=name)
        if len(set(names)) != len(names):
            raise RegistrationError("an analysis lists an agent twice", analysis=name)
        self.definitions[name] = names
        return name

    def agent_name(self, agent: Any) -> str:
        """The registered name of an agent given by name, class or function."""
        if isinstance(agent, str):
            self.resolve(agent)
            return agent
        for name, cls in self.agents.items():
            if cls is agent or getattr(cls, "fn", None) is agent:
                return name
        raise RegistrationError(f"{agent!r} is not registered with this app", agent=repr(agent))

    def step(
        self,
        fn: F | None = None,
        *,
        key: str | None = None,
        retry: Retry | None = None,
        at_most_once: bool = False,
    ) -> Any:
        """Make a function a durable step wherever an agent calls it.

        The step key is ``key`` (default: the function's name), followed by a digest of
        the arguments when there are any: the same call in the same agent returns the
        recorded result. Called outside a run, the function just runs.
        """

        def wrap(f: F) -> F:
            base = str(key or getattr(f, "__name__", "step"))

            @wraps(f)
            def durable(*args: Any, **kwargs: Any) -> Any:
                agent = current_agent.get()
                if agent is None:
                    return f(*args, **kwargs)
                k = base if not (args or kwargs) else f"{base}:{_digest(base, args, kwargs)}"
                return agent.step(k, f, *args, retry=retry, at_most_once=at_most_once, **kwargs)

            return cast(F, durable)

        return wrap(fn) if fn is not None else wrap

    # -- the registry the coordinator reads ------------------------------------------------
    def resolve(self, name: str) -> type[BaseAgent]:
        """The agent registered as ``name``; ``UnknownAgent`` if there is none."""
        return self.registry.resolve(name)

    def names(self) -> list[str]:
        """Every registered agent name."""
        return self.registry.names()

    def entries(
        self, definition: str | Sequence[Any], config: dict[str, Any] | None
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """(definition name or None, the stored agent entries) for a submission."""
        if isinstance(definition, str):
            if definition not in self.definitions:
                raise UnknownAgent(
                    f"analysis {definition!r} is not defined in app {self.name!r}"
                    f" (it defines: {', '.join(sorted(self.definitions)) or 'nothing'})",
                    definition=definition,
                )
            names: Sequence[str] = self.definitions[definition]
            name: str | None = definition
        else:
            names, name = [self.agent_name(a) for a in definition], None
            if not names:
                raise InvalidValue("an analysis needs at least one agent", field="agents")
        return name, [self.resolve(n).entry(config) for n in names]

    # -- using it ------------------------------------------------------------------------
    def submit(
        self,
        stack: Stack,
        definition: str | Sequence[Any],
        input: dict[str, Any] | None = None,
        *,
        ticker: str | None = None,
        config: dict[str, Any] | None = None,
        preserve: bool = False,
        by: str = "amber",
    ) -> str:
        """Queue an analysis (a defined one by name, or a list of agents); its id.

        ``input`` (a JSON object) is every agent's ``ctx.input``; ``ticker`` is the
        company it is about, if any. A worker of this app (``amber worker``) or
        ``app.run`` runs it.
        """
        name, agents = self.entries(definition, config)
        doc = _input(input)
        label = check_ticker(ticker) if ticker is not None else ""
        analysis_id = str(uuid.uuid4())
        stack.analyses.create(
            analysis_id, label, agents, preserve, name, doc, check_reason(by, "by")
        )
        return analysis_id

    def coordinator(self, stack: Stack, market: ApiClient | None = None) -> LeadCoordinator:
        """A coordinator on ``stack`` that runs this app's agents (``market``: the API
        client ``BaseAgent.fetch`` calls); its counters are its own."""
        return stack.coordinator.using(market, registry=self.registry)

    def run(
        self, stack: Stack, analysis_id: object, market: ApiClient | None = None
    ) -> dict[str, AgentResult]:
        """Run a queued analysis here, to its end or its next pause (one-process use)."""
        return self.coordinator(stack, market).run(analysis_id)

    def resume(
        self,
        stack: Stack,
        analysis_id: object,
        by: str = "amber",
        market: ApiClient | None = None,
    ) -> ResumeReport:
        """Resume a paused analysis (or take over one no live run holds) and run it here."""
        from amber.runtime.pause import PauseManager

        coordinator = self.coordinator(stack, market)
        return PauseManager(stack.analyses, coordinator).resume(analysis_id, by)

    def worker(self, stack: Stack, concurrency: int | None = None) -> Worker:
        """A worker that runs this app's queued analyses (see ``amber.runtime.worker``)."""
        from amber.runtime.worker import Worker

        return Worker(stack, self, concurrency)


def _digest(base: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    try:
        raw = orjson.dumps([args, kwargs], option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise InvalidValue(
            f"step {base!r}: its arguments must be JSON to name the step ({exc}); give key=",
            field="args",
        ) from None
    return hashlib.sha256(raw).hexdigest()[:16]


def _input(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    return codec.json_object(value, "input", defaults.DOCUMENT_MAX_BYTES)


def load_app(target: str | None) -> App:
    """The ``App`` named by ``module:attr`` (``--app`` / ``AMBER_APP``)."""
    if not target:
        raise AppNotFound("no app given: pass --app module:attr or set AMBER_APP", app=target)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise AppNotFound(f"--app must be module:attr, not {target!r}", app=target)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module failed to import: say how
        raise AppNotFound(
            f"app module {module_name!r} could not be imported: {type(exc).__name__}: {exc}",
            app=target,
        ) from None
    value = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise AppNotFound(f"module {module_name!r} has no attribute {attr!r}", app=target)
        value = getattr(value, part)
    if not isinstance(value, App):
        raise AppNotFound(f"{target!r} is a {type(value).__name__}, not an amber.App", app=target)
    return value
