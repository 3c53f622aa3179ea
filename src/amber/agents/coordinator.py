"""Moved: the coordinator is the runtime's engine, ``amber.runtime.coordinator``."""

from amber.runtime.coordinator import AgentResult, LeadCoordinator, Registry, Stop

__all__ = ["AgentResult", "LeadCoordinator", "Registry", "Stop"]
