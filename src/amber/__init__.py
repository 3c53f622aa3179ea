"""amber keeps the state of long-running AI agents safe.

Working memory in Redis, checkpoints at subtask boundaries in PostgreSQL, a local
write-ahead log between them; pause for days and resume with zero duplicate work.

    import amber
    with amber.connect() as stack:      # embedded Redis + PostgreSQL, or AMBER_*_URL
        ...
"""

from typing import TYPE_CHECKING

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
    MemoryContended,
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
from amber.lazy import loader

if TYPE_CHECKING:
    from amber.agents import AgentResult, BaseAgent, LeadCoordinator
    from amber.checkpoints import AgentCheckpointer, Checkpoint, checkpoint_migration
    from amber.config import Durability, Settings
    from amber.runtime import App, Decision, Retry, Worker
    from amber.stack import Stack, connect

_WHERE = {
    **dict.fromkeys(
        ["AgentResult", "BaseAgent", "LeadCoordinator"],
        "amber.agents",
    ),
    **dict.fromkeys(
        ["AgentCheckpointer", "Checkpoint", "checkpoint_migration"], "amber.checkpoints"
    ),
    **dict.fromkeys(["Durability", "Settings"], "amber.config"),
    **dict.fromkeys(["Stack", "connect"], "amber.stack"),
    **dict.fromkeys(["App", "Decision", "Retry", "Worker"], "amber.runtime"),
}
"""Where each public name lives: imported on first use, so ``amber --help`` starts fast."""


__getattr__ = loader("amber", _WHERE, globals())


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
    "MemoryContended",
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
