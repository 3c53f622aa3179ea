"""Frozen workers, a short run: ``make chaos`` runs the long one (``tests.chaos.frozen``).

The seed is printed first; replay a failure with ``FROZEN_SEED=<seed>`` or
``python -m tests.chaos.frozen --seed``.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

from tests.chaos.frozen import run_frozen

from ..conftest import Engines

pytestmark = pytest.mark.chaos

ROUNDS = 6


def test_frozen_workers_change_nothing_after_losing_their_leases(
    engines: Engines, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("FROZEN_SEED") or secrets.randbits(32))
    with capsys.disabled():
        print(f"\nfrozen workers seed {seed}", flush=True)
        tally = run_frozen(ROUNDS, seed, tmp_path, sys.stdout)
        print(tally.table(), flush=True)
    assert tally.problems == [], tally.table()
    assert tally.rounds == ROUNDS and tally.analyses >= 4, tally.table()
    assert tally.takeovers > 0, tally.table()  # the freezes lapsed leases that were taken
    assert tally.stuck_reports > 0, tally.table()  # and said the owner was alive but stuck
