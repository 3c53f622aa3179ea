"""The chaos rounds: real analyses in real processes, killed and starved of Redis at random.

The rounds use the suite's PostgreSQL database and a Redis of their own (so they
can restart it). The test prints its seed first and its table last; replay a
failure with ``CHAOS_SEED=<seed>`` or ``python -m tests.chaos.rounds --seed``.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import psutil
import pytest

from tests.chaos.ledger import EXIT, GO, read
from tests.chaos.report import FAILURE_ROWS
from tests.chaos.rounds import Options, run_chaos
from tests.chaos.worker import ACTIONS

from ..conftest import Engines

pytestmark = pytest.mark.chaos

ROUNDS = 120


def _worker(pid: int) -> bool:
    try:
        return any("tests.chaos.worker" in part for part in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def test_chaos_rounds_break_no_invariant(
    engines: Engines, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
    workdir = tmp_path / "chaos"
    opts = Options(ROUNDS, seed, database_url=engines.database_url, workdir=workdir)
    with capsys.disabled():  # the seed and the table show even when the test passes
        print(f"\nchaos seed {seed}", flush=True)
        tally = run_chaos(opts, out=sys.stdout)
    table = tally.table()
    assert tally.rounds == ROUNDS, table
    assert tally.failure_counts() == dict.fromkeys((n for n, _ in FAILURE_ROWS), 0), table
    assert tally.failures == [], table
    # the faults really happened, in every phase
    kills = tally.kills
    assert all(kills[p] > 0 for p in ("subtask", "commit", "pause", "recovery")), table
    assert tally.redis_flush > 0 and tally.redis_restart > 0 and tally.pause_races > 0, table
    assert tally.completed > 0 and tally.takeovers > 0, table
    # every child that went to work was reaped, and none outlived the run
    ledgers = list((workdir / "ledgers").glob("*.log"))
    assert len(ledgers) == len(tally.analyses) + len(opts.modes)  # + the uninterrupted runs
    for path in ledgers:
        entries = read(path)
        went = {e.pid: e.fields[0] for e in entries if e.kind == GO}
        exited = {int(e.fields[0]) for e in entries if e.kind == EXIT}
        assert set(went) <= exited, path
        assert set(went.values()) <= set(ACTIONS), path
        assert not [pid for pid in went if _worker(pid)], f"a child outlived the run: {path}"
