"""amber keeps the state of long-running AI agents safe.

Working memory in Redis, checkpoints at subtask boundaries in PostgreSQL, a local
write-ahead log between them; pause for days and resume with zero duplicate work.

    import amber
    with amber.connect() as stack:      # embedded Redis + PostgreSQL, or AMBER_*_URL
        ...
"""

from amber.agents import (
    ANALYSTS,
    AgentResult,
    BaseAgent,
    FinancialAnalyst,
    LeadCoordinator,
    MarketDataClient,
    StrategyAnalyst,
    ValuationAgent,
)
from amber.checkpoints import AgentCheckpointer, Checkpoint, checkpoint_migration
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
    "ANALYSTS",
    "AgentCheckpointer",
    "AgentResult",
    "AmberError",
    "AnalysisNotFound",
    "AnalysisStateError",
    "BaseAgent",
    "Checkpoint",
    "CheckpointCorrupt",
    "CheckpointNotFound",
    "ConfigError",
    "ConsistencyError",
    "Durability",
    "FinancialAnalyst",
    "InvalidIdentifier",
    "InvalidValue",
    "LeadCoordinator",
    "MarketDataClient",
    "MigrationError",
    "NotFound",
    "QuotaExceeded",
    "Settings",
    "Stack",
    "StoreUnavailable",
    "StrategyAnalyst",
    "UnsupportedType",
    "ValuationAgent",
    "VersionTooNew",
    "WalCorruption",
    "WalError",
    "WrongType",
    "__version__",
    "checkpoint_migration",
    "connect",
]
