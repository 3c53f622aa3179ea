"""Checkpoints at subtask boundaries (DD-011): store, versions, retention."""

from typing import TYPE_CHECKING

from amber.checkpoints.model import Checkpoint
from amber.checkpoints.reads import RestoredCheckpoint
from amber.checkpoints.retention import GcReport, Retention
from amber.checkpoints.store import AgentCheckpointer
from amber.checkpoints.versions import CheckpointMigrations, checkpoint_migration
from amber.lazy import loader

if TYPE_CHECKING:
    from amber.runtime.analyses import Analyses, AnalysisRecord

_LATER = dict.fromkeys(["Analyses", "AnalysisRecord"], "amber.runtime.analyses")
"""The analyses table moved to the runtime; its names stay importable from here."""

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


__getattr__ = loader(__name__, _LATER, globals())
