"""Checkpoints at subtask boundaries (DD-011): store, versions, retention, analyses."""

from amber.checkpoints.analyses import Analyses, AnalysisRecord
from amber.checkpoints.model import Checkpoint
from amber.checkpoints.retention import GcReport, Retention
from amber.checkpoints.store import AgentCheckpointer, RestoredCheckpoint
from amber.checkpoints.versions import CheckpointMigrations, checkpoint_migration

__all__ = [
    "AgentCheckpointer",
    "Analyses",
    "AnalysisRecord",
    "Checkpoint",
    "CheckpointMigrations",
    "GcReport",
    "RestoredCheckpoint",
    "Retention",
    "checkpoint_migration",
]
