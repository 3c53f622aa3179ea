"""Pause and resume whole analyses across days."""

from amber.pause.manager import PauseManager, PauseReport, ResumeReport

__all__ = ["PauseManager", "PauseReport", "ResumeReport"]
