"""``bench/bench_wal.py --quick`` runs end to end and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick(tmp_path: Path) -> None:
    script = ROOT / "bench" / "bench_wal.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("command:") for line in lines)
    header = [line for line in lines if line.startswith("operation")]
    assert header and "p50 ms" in header[0] and "p99 ms" in header[0]
    for case in ("append fsync=always", "append fsync=batch", "checkpoint 1 MB", "replay 1,000"):
        assert any(line.startswith(case) for line in lines), case
    assert list(tmp_path.iterdir()) == []  # it cleans up after itself
