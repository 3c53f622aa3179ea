"""Frozen workers, a short run: ``make chaos`` runs the long one (``tests.chaos.frozen``).

The seed is printed first; replay a failure with ``FROZEN_SEED=<seed>`` or
``python -m tests.chaos.frozen --seed``.
"""

from __future__ import annotations

import os
import secrets
import sys
import uuid
from pathlib import Path

import pytest

import amber
from amber.runtime.steps import StepIntents
from tests.chaos.frozen import _inside, run_frozen

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


def _paid_step(stack: amber.Stack, taken_first: bool) -> tuple[str, str]:
    """An analysis with an at-most-once step's intent begun, and a takeover from the
    run of process 111, in that order (or the takeover first)."""
    aid = str(uuid.uuid4())
    stack.analyses.create(aid, "AAPL", [{"agent_type": "payer"}])
    intents = StepIntents(stack.pg)

    def take() -> None:
        stack.analyses.event(aid, "taken_over", "vm:222:w:b", taken_over_from="vm:111:w:a")

    if taken_first:
        take()
    key = intents.begin(aid, "payer-agent", "payer", "pay", "pay").idempotency_key
    if not taken_first:
        take()
    return aid, key


def test_a_payment_made_again_is_excused_only_as_the_call_a_frozen_payer_was_inside(
    stack: amber.Stack,
) -> None:
    """The woken payer may note its call after the run that took over made it again
    (same key), when it began the step before it lost the analysis; never when the
    step was begun after, nor for two awake payers or one payer twice."""
    aid, key = _paid_step(stack, taken_first=False)
    assert _inside(stack, aid, key, [222, 111], frozen={111})
    assert _inside(stack, aid, key, [111, 222], frozen={111})
    assert not _inside(stack, aid, key, [222, 333], frozen={111})
    assert not _inside(stack, aid, key, [111, 111], frozen={111})
    assert not _inside(stack, aid, key, [222, 444], frozen={444})  # 444 never lost it
    late_aid, late_key = _paid_step(stack, taken_first=True)
    assert not _inside(stack, late_aid, late_key, [222, 111], frozen={111})
