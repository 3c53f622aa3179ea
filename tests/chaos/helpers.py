"""Run small Python children that use amber, and kill each with SIGKILL at a random moment."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

WAIT_FOR_GO = "import sys\nsys.stdin.readline()\n"
"""Children start with this: they import amber, then wait until the previous one is dead."""


def _spawn(script: str, args: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.Popen(
        [sys.executable, "-c", WAIT_FOR_GO + script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def kill_rounds(
    script: str, args: list[str], rounds: int, rng: random.Random, max_delay: float
) -> Iterator[list[str]]:
    """For each round: let a child run, SIGKILL it after a random delay, yield what it printed.

    The lines yielded are those printed after its 'ready' line, each one an
    acknowledgement. Two children are started ahead, so their imports overlap the
    rounds; each touches nothing until told to go.
    """
    upcoming = [_spawn(script, args) for _ in range(min(2, rounds))]
    for index in range(rounds):
        child = upcoming.pop(0)
        if index + len(upcoming) + 1 < rounds:
            upcoming.append(_spawn(script, args))  # imports while this round runs
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        ready = child.stdout.readline()
        assert ready.startswith("ready"), ready
        time.sleep(rng.uniform(0, max_delay))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        lines = out.splitlines()
        if lines and not out.endswith("\n"):
            lines.pop()  # a line cut by the kill was never fully acknowledged
        yield lines


def run_until_it_dies(script: str, args: list[str]) -> int:
    """Run a child that kills itself; return its exit status (-9 for SIGKILL)."""
    child = _spawn(script, args)
    child.communicate("go\n", timeout=60)
    return child.returncode
