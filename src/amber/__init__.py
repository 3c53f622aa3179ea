"""amber keeps the state of long-running AI agents safe.

Working memory in Redis, checkpoints at subtask boundaries in PostgreSQL, a local
write-ahead log between them; pause for days and resume with zero duplicate work.

    import amber
    with amber.connect() as stack:      # embedded Redis + PostgreSQL, or AMBER_*_URL
        ...
"""

from amber.config import Durability, Settings
from amber.engines.stack import Stack, connect
from amber.errors import (
    AmberError,
    AnalysisNotFound,
    AnalysisStateError,
    CheckpointCorrupt,
    CheckpointNotFound,
    ConfigError,
    ConsistencyError,
    InvalidIdentifier,
    InvalidValue,
    MigrationError,
    NotFound,
    QuotaExceeded,
    StoreUnavailable,
    UnsupportedType,
    VersionTooNew,
    WalCorruption,
    WalError,
    WrongType,
)

__version__ = "0.1.0"

__all__ = [
    "AmberError",
    "AnalysisNotFound",
    "AnalysisStateError",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "ConfigError",
    "ConsistencyError",
    "Durability",
    "InvalidIdentifier",
    "InvalidValue",
    "MigrationError",
    "NotFound",
    "QuotaExceeded",
    "Settings",
    "Stack",
    "StoreUnavailable",
    "UnsupportedType",
    "VersionTooNew",
    "WalCorruption",
    "WalError",
    "WrongType",
    "__version__",
    "connect",
]
