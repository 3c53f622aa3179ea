"""The README's first example, as its shell block runs it: ``report.py`` (taken from the
README itself), ``amber submit``, two ``amber worker`` processes, the one running the
analysis killed with SIGKILL, the other finishing it, ``amber analyses show``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import amber
from tests.conftest import Engines

ROOT = Path(__file__).resolve().parents[2]
MODULE = re.compile(r"```python\n(# report\.py\n.*?)```", re.S)


def readme_module() -> str:
    (code,) = MODULE.findall((ROOT / "README.md").read_text())
    return code


def amber_process(*args: str) -> list[str]:
    return [sys.executable, "-c", "from amber.cli import main; main()", *args]


def test_the_readme_example_survives_a_killed_worker(
    engines: Engines, stack: amber.Stack, tmp_path: Path
) -> None:
    (tmp_path / "report.py").write_text(readme_module())
    path = os.pathsep.join([str(tmp_path), str(ROOT / "src"), str(ROOT)])
    env = dict(os.environ, PYTHONPATH=path, AMBER_WORKER_POLL="0.2")
    app = ["--app", "report:app"]

    def start_worker() -> subprocess.Popen[str]:
        return subprocess.Popen(
            amber_process("worker", *app),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )

    def amber(*args: str) -> str:
        """One CLI command, run to its end; its stdout."""
        done = subprocess.run(
            amber_process(*args),
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
            check=True,
        )
        return done.stdout

    aid = amber("submit", "daily", *app, "--input", '{"day": "2025-06-01"}').strip()
    first = start_worker()
    second: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 30
        while f":{first.pid}:" not in (stack.analyses.get(aid).lease_owner or ""):
            assert time.monotonic() < deadline and first.poll() is None, "no claim"
            time.sleep(0.05)
        second = start_worker()
        time.sleep(1)  # the first worker is inside "fetch" (3 s)
        first.send_signal(signal.SIGKILL)
        first_out, _ = first.communicate(timeout=30)
        deadline = time.monotonic() + 60
        while stack.analyses.get(aid).status != "completed":
            assert time.monotonic() < deadline, "the second worker never finished the analysis"
            time.sleep(0.1)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        if second is not None:
            second.send_signal(signal.SIGTERM)
            second_out, second_err = second.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    assert second is not None and second.returncode == 0, second_err

    runs = Counter(line.split(":")[0] for line in (first_out + second_out).splitlines())
    starts = {step: runs[step] for step in ("fetch", "total")}
    assert starts["total"] == 1 and 1 <= starts["fetch"] <= 2, starts  # only "fetch" was in flight
    assert sum(n - 1 for n in starts.values()) <= 1

    report = json.loads(amber("analyses", "show", aid, "--json"))
    assert report["status"] == "completed"
    (agent,) = report["agents"]
    assert agent["result"] == {"day": "2025-06-01", "revenue": 42.5}
    assert agent["steps"] == ["fetch", "total"]
    events = [(e["kind"], e["by"] or "") for e in report["timeline"]]
    assert [k for k, _ in events] == ["submitted", "claimed", "taken_over", "completed"]
    assert f":{first.pid}:" in events[1][1] and f":{second.pid}:" in events[2][1]
