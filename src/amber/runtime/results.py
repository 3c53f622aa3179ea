"""How an agent's run ended (``AgentResult``), and why it stopped early (``Stop``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
