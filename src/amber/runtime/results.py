"""How an agent's run ended (``AgentResult``), and why it stopped early (``Stop``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESULT_KEY = "amber:result"
"""The step that records a function agent's return value: bookkeeping, never counted as
one of the agent's steps."""


def counted_steps(names: list[str]) -> list[str]:
    """An agent's steps as a person counts them: without ``RESULT_KEY``."""
    return [n for n in names if n != RESULT_KEY]


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
    word: str = "subtasks"
    """What the agent calls its units: ``subtasks`` (a class agent), ``steps`` (a function)."""

    @property
    def progress(self) -> str:
        """'3 of 5 subtasks' (a function agent: '2 of 2 steps'), its result not counted."""
        return f"{len(counted_steps(self.completed))} of {self.total} {self.word}"


@dataclass
class Stop:
    """Why an agent stopped before finishing: what its pause checkpoint records."""

    status: str
    error: str | None = None
    details: dict[str, Any] | None = None
