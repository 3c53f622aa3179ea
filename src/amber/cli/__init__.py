"""amber's command line: a thin shell over the public API."""

from __future__ import annotations

from amber.cli import (
    analyses,
    checkpoints,
    demo,
    engines,
    memory,
    runtime,
    serve,
    sessions,
    wal,
)
from amber.cli.app import app

__all__ = [
    "analyses",
    "app",
    "checkpoints",
    "demo",
    "engines",
    "main",
    "memory",
    "runtime",
    "serve",
    "sessions",
    "wal",
]


def main() -> None:
    """Entry point of the ``amber`` command."""
    app()
