"""amber keeps the state of long-running AI agents safe.

Working memory in Redis, checkpoints at subtask boundaries in PostgreSQL, a local
write-ahead log between them; pause for days and resume with zero duplicate work.

    import amber
    with amber.connect() as stack:      # embedded Redis + PostgreSQL, or AMBER_*_URL
        ...
"""

from typing import TYPE_CHECKING, Any

from amber.errors import (
    AmberError,
    AnalysisBusy,
    AnalysisNotFound,
    AnalysisStateError,
    AppNotFound,
    AwaitingReview,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    CodeChanged,
    ConfigError,
    ConsistencyError,
    Fenced,
    InvalidIdentifier,
    InvalidValue,
    MemoryLost,
    MemoryRollbackRefused,
    MigrationError,
    NotFound,
    QuotaExceeded,
    RegistrationError,
    ReviewAlreadyDecided,
    ReviewNotFound,
    StepFailed,
    StepInDoubt,
    StepMismatch,
    StoreUnavailable,
    UnknownAgent,
    UnsupportedType,
    VersionTooNew,
    WalCorruption,
    WalError,
    WrongType,
)

if TYPE_CHECKING:
    from amber.agents import AgentResult, BaseAgent, LeadCoordinator
    from amber.checkpoints import AgentCheckpointer, Checkpoint, checkpoint_migration
    from amber.config import Durability, Settings
    from amber.engines.stack import Stack, connect
    from amber.runtime import App, Decision, Retry, Worker

_WHERE = {
    **dict.fromkeys(
        ["AgentResult", "BaseAgent", "LeadCoordinator"],
        "amber.agents",
    ),
    **dict.fromkeys(
        ["AgentCheckpointer", "Checkpoint", "checkpoint_migration"], "amber.checkpoints"
    ),
    **dict.fromkeys(["Durability", "Settings"], "amber.config"),
    **dict.fromkeys(["Stack", "connect"], "amber.engines.stack"),
    **dict.fromkeys(["App", "Decision", "Retry", "Worker"], "amber.runtime"),
}
"""Where each public name lives: imported on first use, so ``amber --help`` starts fast."""


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    import importlib

    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'amber' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "AgentCheckpointer",
    "AgentResult",
    "AmberError",
    "AnalysisBusy",
    "AnalysisNotFound",
    "AnalysisStateError",
    "App",
    "AppNotFound",
    "AwaitingReview",
    "BaseAgent",
    "Checkpoint",
    "CheckpointConflict",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "CodeChanged",
    "ConfigError",
    "ConsistencyError",
    "Decision",
    "Durability",
    "Fenced",
    "InvalidIdentifier",
    "InvalidValue",
    "LeadCoordinator",
    "MemoryLost",
    "MemoryRollbackRefused",
    "MigrationError",
    "NotFound",
    "QuotaExceeded",
    "RegistrationError",
    "Retry",
    "ReviewAlreadyDecided",
    "ReviewNotFound",
    "Settings",
    "Stack",
    "StepFailed",
    "StepInDoubt",
    "StepMismatch",
    "StoreUnavailable",
    "UnknownAgent",
    "UnsupportedType",
    "VersionTooNew",
    "WalCorruption",
    "WalError",
    "Worker",
    "WrongType",
    "__version__",
    "checkpoint_migration",
    "connect",
]
