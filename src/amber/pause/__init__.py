"""Pause and resume whole analyses across days (the runtime's ``amber.runtime.pause``)."""

from typing import TYPE_CHECKING

from amber.lazy import loader

if TYPE_CHECKING:
    from amber.runtime.pause import PauseManager, PauseReport, ResumeReport

_LATER = dict.fromkeys(["PauseManager", "PauseReport", "ResumeReport"], "amber.runtime.pause")

__all__ = ["PauseManager", "PauseReport", "ResumeReport"]


__getattr__ = loader(__name__, _LATER, globals())
