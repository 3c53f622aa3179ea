"""Agents: ``BaseAgent`` (ordered subtasks); the runtime's coordinator runs them."""

from typing import TYPE_CHECKING

from amber.agents.base import ApiClient, BaseAgent
from amber.lazy import loader

if TYPE_CHECKING:
    from amber.runtime.coordinator import LeadCoordinator
    from amber.runtime.results import AgentResult

_LATER = {"AgentResult": "amber.runtime.results", "LeadCoordinator": "amber.runtime.coordinator"}
"""Names of the runtime, kept importable from here."""

__all__ = ["AgentResult", "ApiClient", "BaseAgent", "LeadCoordinator"]


__getattr__ = loader(__name__, _LATER, globals())
