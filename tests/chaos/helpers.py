"""Run a small Python child that uses amber, and kill it with SIGKILL at a random moment."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_and_kill(script: str, args: list[str], rng: random.Random, max_delay: float) -> list[str]:
    """Start ``script``, wait for its 'ready' line, SIGKILL it after a random delay.

    Returns every line it printed after 'ready' (each one an acknowledgement).
    """
    env = dict(os.environ, PYTHONPATH=SRC)
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    ready = child.stdout.readline()
    assert ready.startswith("ready"), ready
    time.sleep(rng.uniform(0, max_delay))
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    lines = out.splitlines()
    if lines and not out.endswith("\n"):
        lines.pop()  # a line cut by the kill was never fully acknowledged
    return lines
