"""Moved: the coordinator is the runtime's engine, ``amber.runtime.coordinator``."""

from amber.runtime.coordinator import LeadCoordinator
from amber.runtime.preparing import Registry
from amber.runtime.results import AgentResult, Stop

__all__ = ["AgentResult", "LeadCoordinator", "Registry", "Stop"]
