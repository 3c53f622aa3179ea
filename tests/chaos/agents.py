"""Agents for the process-level fault tests: each subtask leaves a line in a ledger file.

The ledger is opened with O_APPEND and written with one ``os.write`` per line, so a
line written before a SIGKILL is there after it. ``gate`` blocks until its gate
file exists, so a test can hold a runner inside a subtask.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import amber
from amber.agents import BaseAgent


def note(path: str, line: str) -> None:
    """Append one line to a ledger file; durable against the writer's SIGKILL."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def ledger(path: str | Path) -> list[list[str]]:
    """The ledger's lines, split into words."""
    p = Path(path)
    return [line.split() for line in p.read_text().splitlines()] if p.exists() else []


class GateAgent(BaseAgent):
    """Three subtasks; the middle one waits for ``config['gate']`` to exist."""

    agent_type = "gate_agent"
    subtasks = ("one", "gate", "three")

    def run_subtask(self, name: str) -> Any:
        """Record the start, keep a note in working memory, wait at the gate."""
        note(self.config["ledger"], f"start {name} {os.getpid()}")
        self.l1_cache.set(f"note:{name}", name)
        self.l1_cache.hset("notes", name, str(len(self.completed_subtasks)))
        if name == "gate":
            while not os.path.exists(self.config["gate"]):
                time.sleep(0.02)
        return {"done": name}


app = amber.App("chaos")
"""The fault tests' agents as an application: ``--app tests.chaos.agents:app``."""
app.agent(GateAgent)
