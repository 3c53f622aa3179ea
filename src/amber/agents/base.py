"""``BaseAgent``: an agent made of ordered subtasks, each ending in a storable deliverable."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import orjson

from amber.agents.market import MarketDataClient, call_key
from amber.checkpoints.model import Checkpoint
from amber.errors import AmberError
from amber.keys import check_id
from amber.memory.working import AgentMemory

AGENT_TYPES: dict[str, type[BaseAgent]] = {}
"""Every BaseAgent subclass with an ``agent_type``, registered when its class is defined."""


class BaseAgent:
    """Subclass, set ``agent_type``, ``version`` and ``subtasks``, implement ``run_subtask``.

    ``run_subtask(name)`` returns the subtask's deliverable (JSON-able); the
    coordinator stores it in ``interim_results[name]`` and checkpoints. Use
    ``self.l1_cache`` for working memory and ``self.fetch`` for API calls, which
    caches each response in working memory so a resumed agent never repeats one.
    """

    agent_type: ClassVar[str] = ""
    version: ClassVar[str] = "1.0"
    subtasks: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.agent_type:
            check_id(cls.agent_type, "agent_type")
            AGENT_TYPES[cls.agent_type] = cls

    def __init__(
        self,
        analysis_id: str,
        stock_ticker: str,
        l1_cache: AgentMemory,
        market: MarketDataClient | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        if not self.subtasks:
            raise AmberError(f"{type(self).__name__} declares no subtasks")
        self.analysis_id = str(analysis_id)
        self.stock_ticker = stock_ticker
        self.l1_cache = l1_cache
        self.agent_id = l1_cache.agent_id
        self.market = market or MarketDataClient()
        self.config: dict[str, Any] = dict(config or {})
        self.completed_subtasks: list[str] = []
        self.pending_subtasks: list[str] = list(self.subtasks)
        self.retry_count = 0
        self.interim_results: dict[str, Any] = {}
        self.executions: dict[str, int] = {}
        """How many times each subtask was started in this process (duplicate-work probe)."""
        self.checkpoint_seq = 0
        """Sequence of the newest checkpoint this agent continues from (0: none yet)."""
        self.checkpoint_l1_keys = 0
        """Keys in that checkpoint's working-memory snapshot."""
        self.runner = ""
        """The run this agent belongs to (``host:pid:token``); written into its checkpoints."""

    @staticmethod
    def new_agent_id(agent_type: str) -> str:
        """A fresh agent id for ``agent_type``."""
        return f"{agent_type}_{uuid.uuid4().hex[:12]}"

    # -- DD-011's view of progress --------------------------------------------------------
    def calculate_progress(self) -> float:
        """Percentage of subtasks completed."""
        total = len(self.completed_subtasks) + len(self.pending_subtasks)
        return 100.0 * len(self.completed_subtasks) / total if total else 100.0

    def next_subtask(self) -> str | None:
        """The subtask that runs next, or None when done."""
        return self.pending_subtasks[0] if self.pending_subtasks else None

    def get_interim_results(self) -> dict[str, Any]:
        """Deliverables so far, by subtask."""
        return dict(self.interim_results)

    def set_interim_results(self, results: dict[str, Any]) -> None:
        """Replace the deliverables (on restore)."""
        self.interim_results = dict(results)

    def complete(self, subtask: str, deliverable: Any) -> None:
        """Record a finished subtask and its deliverable."""
        self.interim_results[subtask] = deliverable
        self.pending_subtasks.remove(subtask)
        self.completed_subtasks.append(subtask)

    def uncomplete(self, subtask: str) -> None:
        """Undo :meth:`complete` (its checkpoint was not written): the subtask runs again."""
        self.interim_results.pop(subtask, None)
        self.completed_subtasks.remove(subtask)
        self.pending_subtasks.insert(0, subtask)

    def apply_checkpoint(self, cp: Checkpoint, head_seq: int | None = None) -> None:
        """Continue from ``cp``: completed subtasks are never run again.

        ``head_seq`` is the newest sequence PostgreSQL holds for the agent (above
        ``cp.seq`` only when newer rows were unreadable): the next checkpoint follows it.
        """
        self.checkpoint_seq = max(cp.seq, head_seq or 0)
        self.checkpoint_l1_keys = cp.l1_snapshot_keys or 0
        self.completed_subtasks = list(cp.completed_subtasks)
        self.pending_subtasks = list(cp.pending_subtasks)
        self.retry_count = cp.retry_count
        self.config = dict(cp.agent_config)
        self.set_interim_results(cp.interim_results)

    # -- work -----------------------------------------------------------------------------
    def run_subtask(self, name: str) -> Any:
        """Do one subtask and return its deliverable. Subclasses implement this."""
        raise NotImplementedError

    def fetch(self, provider: str, endpoint: str, **params: Any) -> Any:
        """An API call whose response is cached in working memory: never made twice."""
        key = "api_cache:" + call_key(provider, endpoint, params)
        cached = self.l1_cache.get(key)
        if cached is not None:
            return orjson.loads(cached)
        response = self.market.fetch(provider, endpoint, **params)
        self.l1_cache.set(key, orjson.dumps(response))
        return response
