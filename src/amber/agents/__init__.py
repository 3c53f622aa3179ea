"""Agents: subtasks, the three example analysts, and the coordinator that runs them."""

from amber.agents.analysts import ANALYSTS, FinancialAnalyst, StrategyAnalyst, ValuationAgent
from amber.agents.base import BaseAgent
from amber.agents.coordinator import AgentResult, LeadCoordinator
from amber.agents.market import MarketDataClient

__all__ = [
    "ANALYSTS",
    "AgentResult",
    "BaseAgent",
    "FinancialAnalyst",
    "LeadCoordinator",
    "MarketDataClient",
    "StrategyAnalyst",
    "ValuationAgent",
]
