"""Moved: the one status read model is ``amber.runtime.status``."""

from amber.runtime.status import QUEUED, checkpoint_row, detail, pause_row, summary

__all__ = ["QUEUED", "checkpoint_row", "detail", "pause_row", "summary"]
