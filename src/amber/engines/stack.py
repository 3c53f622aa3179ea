"""Moved: the composition root is ``amber.stack``."""

from amber.stack import Stack, connect

__all__ = ["Stack", "connect"]
