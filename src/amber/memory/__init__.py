"""L1 working memory and its durability (DD-016, Flaw #25)."""

from amber.memory.recovery import DualRecoveryStrategy, RecoveryReport, l1_complete
from amber.memory.restore import ConsistencyVerifier, L1CacheRestorer, RestoreReport
from amber.memory.snapshot import L1CacheSnapshotter, Snapshot, SnapshotMeta, read_memory
from amber.memory.ttl import L1TTLManager
from amber.memory.working import AgentMemory

__all__ = [
    "AgentMemory",
    "ConsistencyVerifier",
    "DualRecoveryStrategy",
    "L1CacheRestorer",
    "L1CacheSnapshotter",
    "L1TTLManager",
    "RecoveryReport",
    "RestoreReport",
    "Snapshot",
    "SnapshotMeta",
    "l1_complete",
    "read_memory",
]
