"""Chaos children: started ahead of need, given an order, killed by pid.

Python start-up and the amber import take about a third of a second of CPU; the
pool keeps a few children that have done it and wait on stdin, so start-ups
overlap the rounds instead of adding to them.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
WORKER = "tests.chaos.worker"


class ChildFailed(RuntimeError):
    """A child died or answered something else where ``ready`` was expected."""


class Child:
    """One worker process and the lines it printed."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._buffer = b""
        self.action = ""
        """What it was ordered to do (run, resume, pause)."""
        self.killed_by: str | None = None
        """Why the engine killed it, if it did."""

    def send(self, line: str) -> None:
        """Write one line to its stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def readline(self, timeout: float) -> str | None:
        """The next line it prints, or None at end of output or after ``timeout`` seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def alive(self) -> bool:
        """Not exited yet."""
        return self.proc.poll() is None

    def kill(self, reason: str) -> bool:
        """SIGKILL it if it still runs; True if the signal was sent."""
        if not self.alive():
            return False
        self.killed_by = reason
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        return True

    def wait(self, timeout: float) -> int | None:
        """Its return code, or None if it still runs after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def remaining_lines(self) -> list[str]:
        """Whole lines printed and not yet read (after it exited)."""
        assert self.proc.stdout is not None
        rest = self._buffer + self.proc.stdout.read()
        self._buffer = b""
        return [line for line in rest.decode(errors="replace").split("\n")[:-1] if line]

    def close(self) -> None:
        """Close its pipes (it must have exited)."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class Pool:
    """Children that have imported amber and wait for an order, ``size`` of them ahead."""

    def __init__(self, size: int, stderr: IO[bytes]) -> None:
        self.size = size
        self.stderr = stderr
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(ROOT)]))
        self._idle: list[Child] = []
        self.started: list[Child] = []
        """Every child ever started, so none outlives the engine."""
        self.refill()

    def _spawn(self) -> Child:
        proc = subprocess.Popen(
            [sys.executable, "-m", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=ROOT,
            env=self.env,
        )
        child = Child(proc)
        self.started.append(child)
        return child

    def refill(self) -> None:
        """Start children until ``size`` wait."""
        while len(self._idle) < self.size:
            self._idle.append(self._spawn())

    def take(self) -> Child:
        """A waiting child (the oldest, whose import is furthest along); one more is started."""
        child = self._idle.pop(0) if self._idle else self._spawn()
        self.started = [c for c in self.started if c.proc.returncode is None]
        self.refill()
        return child

    def close(self) -> None:
        """Let idle children exit, kill any other still running, reap them all."""
        for child in self._idle:
            with contextlib.suppress(OSError):
                child.send("")
        for child in self.started:
            if child not in self._idle:
                child.kill("engine closing")
        for child in self.started:
            if child.wait(10) is None:
                child.kill("engine closing")
                child.wait(10)
            child.close()
        self._idle.clear()
        self.started.clear()
