"""The benchmark scripts run end to end (``--quick``) and print their table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Engines

BENCH = Path(__file__).resolve().parent.parent / "bench"
TABLE_HEADER = "operation"


@pytest.mark.parametrize("script", ["bench_checkpoint.py", "bench_memory.py", "bench_langgraph.py"])
def test_bench_quick(script: str, engines: Engines) -> None:
    env = dict(os.environ, AMBER_REDIS_URL=engines.redis_url,
               AMBER_DATABASE_URL=engines.admin_url)  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("command:") for line in lines)
    header = [line for line in lines if line.startswith(TABLE_HEADER)]
    assert header and "p50 ms" in header[0] and "p99 ms" in header[0], proc.stdout[-3000:]
