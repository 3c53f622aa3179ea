"""Agents: ``BaseAgent`` (ordered subtasks) and the coordinator that runs them."""

from amber.agents.base import ApiClient, BaseAgent
from amber.agents.coordinator import AgentResult, LeadCoordinator

__all__ = ["AgentResult", "ApiClient", "BaseAgent", "LeadCoordinator"]
