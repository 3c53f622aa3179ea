"""The runtime API the chaos engine needs, and stand-ins for its missing members (``--dry``).

``missing_api`` lists what the core in this checkout does not provide. Without
``--dry`` the engine refuses to start if anything is missing. With ``--dry`` each
missing member is bridged by the nearest thing the current core allows, so the
harness itself (processes, kills, Redis faults, ledgers, table) runs end to end;
the invariants that need a missing member are reported as not measured.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import amber
from amber.agents.coordinator import LeadCoordinator
from amber.checkpoints.analyses import Analyses
from amber.schema.sql import RUNNER_LOCK_SPACE
from amber.checkpoints.store import AgentCheckpointer
from amber.memory.snapshot import L1CacheSnapshotter
from amber.pause.manager import PauseReport

CHECKPOINT_COLUMNS = ("seq", "writer")
"""Columns of ``agent_checkpoints`` the re-execution invariant reads."""


def missing_members() -> list[str]:
    """The runtime members missing from the core's classes (no servers needed)."""
    missing = []
    if "preserve" not in inspect.signature(LeadCoordinator.start_analysis).parameters:
        missing.append("LeadCoordinator.start_analysis(..., preserve=)")
    if not hasattr(AgentCheckpointer, "_cache"):
        missing.append("AgentCheckpointer._cache")
    if not hasattr(Analyses, "has_runner"):
        missing.append("Analyses.has_runner")
    fields = getattr(PauseReport, "__dataclass_fields__", {})
    if "pending" not in fields and not hasattr(PauseReport, "pending"):
        missing.append("PauseReport.pending")
    return missing


def missing_api(stack: amber.Stack) -> list[str]:
    """Every runtime member this engine relies on that the core does not have."""
    missing = missing_members()
    if not hasattr(stack.coordinator, "on_subtask_start"):
        missing.append("LeadCoordinator.on_subtask_start")
    missing += [f"agent_checkpoints.{c}" for c in missing_columns(stack)]
    return missing


def missing_columns(stack: amber.Stack) -> list[str]:
    """Which of ``CHECKPOINT_COLUMNS`` the checkpoint table lacks."""
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'agent_checkpoints' AND table_schema = current_schema()"
        ).fetchall()
    have = {str(r[0]) for r in rows}
    return [c for c in CHECKPOINT_COLUMNS if c not in have]


# -- stand-ins ------------------------------------------------------------------------------
def start_analysis(stack: amber.Stack, ticker: str) -> str:
    """Start an analysis of the three analysts whose checkpoints outlive its completion."""
    co = stack.coordinator
    if "preserve" in inspect.signature(co.start_analysis).parameters:
        return co.start_analysis(ticker, amber.ANALYSTS, preserve=True)  # type: ignore[call-arg]
    aid = co.start_analysis(ticker, amber.ANALYSTS)
    stack.analyses.set_preserve(aid)
    return aid


def has_runner(stack: amber.Stack, analysis_id: str) -> bool:
    """Whether a live process holds the analysis's runner lock."""
    if hasattr(stack.analyses, "has_runner"):
        return bool(stack.analyses.has_runner(analysis_id))
    # the current core's runner lock: a session advisory lock (RUNNER_LOCK_SPACE, hashtext(id))
    with stack.pg.connection() as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = %s::bigint::oid"
            " AND objid = (hashtext(%s)::bigint & 4294967295)::oid AND objsubid = 2)",
            (RUNNER_LOCK_SPACE, analysis_id),
        ).fetchone()
    return bool(row and row[0])


def take_over(stack: amber.Stack, analysis_id: str) -> None:
    """Let the current core's resume take a ``running`` analysis whose runner died.

    It only resumes ``paused`` ones; the runtime API's resume takes over by itself.
    """
    record = stack.analyses.get(analysis_id)
    if record.status == "running" and not has_runner(stack, analysis_id):
        stack.analyses.transition(analysis_id, "paused", ("running",))


def log_starts(on_start: Callable[[Any, str], None]) -> None:
    """Call ``on_start(agent, subtask)`` before every subtask of the three analysts."""
    for cls in amber.ANALYSTS:
        original = cls.run_subtask

        def run_subtask(self: Any, name: str, _original: Any = original) -> Any:
            on_start(self, name)
            return _original(self, name)

        cls.run_subtask = run_subtask  # type: ignore[method-assign]


def after_commit(hook: Callable[[], None]) -> None:
    """Call ``hook()`` after each checkpoint's PostgreSQL commit, before its Redis write.

    The runtime API names that point ``AgentCheckpointer._cache``; in the current core
    it is the secondary's write queued by ``save_checkpoint`` right after its INSERT.
    """
    if hasattr(AgentCheckpointer, "_cache"):
        original_cache = AgentCheckpointer._cache

        def cache(self: Any, *args: Any, **kwargs: Any) -> Any:
            hook()
            return original_cache(self, *args, **kwargs)

        AgentCheckpointer._cache = cache
        return
    saving = [False]
    original_save = AgentCheckpointer.save_checkpoint
    original_write = L1CacheSnapshotter.write_secondary

    def save_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        saving[0] = True
        try:
            return original_save(self, *args, **kwargs)
        finally:
            saving[0] = False

    def write_secondary(self: Any, *args: Any, **kwargs: Any) -> None:
        if saving[0]:
            hook()
        original_write(self, *args, **kwargs)

    AgentCheckpointer.save_checkpoint = save_checkpoint  # type: ignore[method-assign]
    L1CacheSnapshotter.write_secondary = write_secondary  # type: ignore[method-assign]
