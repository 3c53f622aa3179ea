"""Moved: pausing is part of the runtime, ``amber.runtime.pause``."""

from amber.runtime.pause import PauseManager, PauseReport, ResumeReport

__all__ = ["PauseManager", "PauseReport", "ResumeReport"]
