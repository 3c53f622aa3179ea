"""amber's command line: a thin shell over the public API."""

from __future__ import annotations

from amber.cli import demo, engines, wal
from amber.cli.app import app

__all__ = ["app", "demo", "engines", "main", "wal"]


def main() -> None:
    """Entry point of the ``amber`` command."""
    app()
