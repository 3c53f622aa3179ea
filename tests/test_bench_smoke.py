"""The benchmark scripts run end to end (``--quick``) and print their tables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Engines

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_quick(script: str, engines: Engines, *args: str) -> list[str]:
    env = dict(os.environ, AMBER_REDIS_URL=engines.redis_url,
               AMBER_DATABASE_URL=engines.admin_url)  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick", *args],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("command:") for line in lines), proc.stdout[-3000:]
    return lines


@pytest.mark.parametrize("script", ["bench_checkpoint.py", "bench_memory.py", "bench_langgraph.py"])
def test_bench_quick(script: str, engines: Engines) -> None:
    lines = run_quick(script, engines)
    header = [line for line in lines if line.startswith("operation")]
    assert header and "p50 ms" in header[0] and "p99 ms" in header[0], "\n".join(lines[-40:])


def test_bench_cli_quick(engines: Engines) -> None:
    lines = run_quick("bench_cli.py", engines)
    assert any(line.startswith("amber --help") for line in lines), "\n".join(lines)


def test_bench_save_quick(engines: Engines) -> None:
    lines = run_quick("bench_save.py", engines)
    out = "\n".join(lines)
    assert any(line.startswith("sync:") and "synchronous_commit=" in line for line in lines)
    latency = [line for line in lines if line.startswith("case ")]
    assert latency and "ratio p50" in latency[0] and "p99 ms" in latency[0], out[-3000:]
    for case in ("5 changed", "all changed", "first save of a fresh memory", "restore with memory"):
        rows = [line for line in lines if case in line]
        assert {"checkpoint"} <= {w for line in rows for w in line.split()}, (case, out[-3000:])
    floors = [
        line for line in lines if "5 changed" in line and ("pg commit" in line or "+ pg" in line)
    ]
    assert len(floors) == 4, out[-3000:]  # the two floors beside each 5-key save
    saves = [line for line in lines if line.startswith("processes ")]
    assert saves and "LG saves/s" in saves[0], out[-3000:]
    assert any(line.startswith("1 process ") for line in lines), out[-3000:]


def test_bench_save_throughput_alone(engines: Engines) -> None:
    lines = run_quick("bench_save.py", engines, "--procs", "2")
    out = "\n".join(lines)
    assert not any(line.startswith("case ") for line in lines), out[-3000:]
    assert any(line.startswith("2 processes ") for line in lines), out[-3000:]
    assert not any(line.startswith("1 process ") for line in lines), out[-3000:]


def test_bench_runtime_quick(engines: Engines) -> None:
    lines = run_quick("bench_runtime.py", engines)
    out = "\n".join(lines)
    header = [line for line in lines if line.startswith("measure")]
    assert header and "p50" in header[0] and "p99" in header[0], out[-3000:]
    for measure in ("steps/s", "step overhead", "takeover latency", "workers SIGKILLed"):
        assert any(line.startswith(measure) for line in lines), (measure, out[-3000:])
    for must_be_zero in ("re-executed completed steps", "analyses left unfinished"):
        (row,) = [line for line in lines if line.startswith(must_be_zero)]
        assert row.split()[-1] == "0", out[-3000:]


def test_bench_cluster_quick(engines: Engines) -> None:
    lines = run_quick("bench_cluster.py", engines)
    out = "\n".join(lines)
    head = [line for line in lines if line.startswith("redis ")]
    assert head and "saves/s" in head[0] and "restore p99 ms" in head[0], out[-3000:]
    runs = [
        line for line in lines if line.startswith(("one server", "AMBER_REDIS_URL", "cluster "))
    ]
    assert len(runs) == 2 and all(line.split()[-1] == "0" for line in runs), out[-3000:]  # errors
    levels = [line.split()[0] for line in lines if line.strip().startswith(("1,000 ", "10,000 "))]
    assert levels == ["1,000", "1,000", "10,000", "10,000"], out[-3000:]


def test_bench_steps_quick(engines: Engines) -> None:
    lines = run_quick("bench_steps.py", engines)
    assert any(line.startswith("steps 151-200") for line in lines), "\n".join(lines)


def test_bench_pg_failover_quick(engines: Engines) -> None:
    lines = run_quick("bench_pg_failover.py", engines)
    rows = [line for line in lines if line.startswith("round 1")]
    assert rows and rows[0].split()[-1] == "0", "\n".join(lines)  # no broken promise


def test_bench_instructions_runs_its_operations(engines: Engines) -> None:
    """Natively (the counts need valgrind, minutes a run): every operation runs in the
    child process and the table names each side."""
    lines = run_quick("bench_instructions.py", engines, "--native")
    out = "\n".join(lines)
    head = [line for line in lines if line.startswith("side ")]
    assert head and "instructions / op" in head[0], out[-3000:]
    sides = [line.split()[0] for line in lines if line.startswith(("amber ", "LangGraph "))]
    assert sides == ["amber", "LangGraph", "amber", "LangGraph"], out[-3000:]


def test_callgrind_dumps_are_read_by_the_name_they_were_dumped_under(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from bench_instructions import counts
    finally:
        sys.path.remove(str(BENCH))
    (tmp_path / "cg.out.7.1").write_text(
        "# callgrind format\ndesc: Trigger: dump amber_save\nsummary: 4000\n"
    )
    (tmp_path / "cg.out.7.2").write_text("desc: Trigger: dump lg_save\nsummary: 3000\ntotals: 9\n")
    (tmp_path / "cg.out.7").write_text("desc: Trigger: Program termination\nsummary: 1\n")
    assert counts(tmp_path) == {"amber_save": 4000, "lg_save": 3000}
