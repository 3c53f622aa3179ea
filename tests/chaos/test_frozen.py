"""Frozen workers, a short run: ``make chaos`` runs the long one (``tests.chaos.frozen``).

The seed is printed first; replay a failure with ``FROZEN_SEED=<seed>`` or
``python -m tests.chaos.frozen --seed``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import uuid
from collections.abc import Iterator
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


@contextlib.contextmanager
def _paid_step(stack: amber.Stack, taken_first: bool) -> Iterator[tuple[str, str]]:
    """An analysis with an at-most-once step's intent begun, and a takeover from the
    run of process 111, in that order (or the takeover first); deleted afterwards, so
    no other test lists it."""
    aid = str(uuid.uuid4())
    agent = {"agent_type": "payer", "agent_id": "payer-agent", "version": "1.0",
             "config": {}, "steps": ["pay"]}  # fmt: skip
    stack.analyses.create(aid, "AAPL", [agent])
    try:

        def take() -> None:
            stack.analyses.event(aid, "taken_over", "vm:222:w:b", taken_over_from="vm:111:w:a")

        if taken_first:
            take()
        intent = StepIntents(stack.pg).begin(aid, "payer-agent", "payer", "pay", "pay")
        if not taken_first:
            take()
        yield aid, intent.idempotency_key
    finally:
        with stack.pg.connection() as conn:
            conn.execute("DELETE FROM analyses WHERE analysis_id = %s", (aid,))


def test_a_payment_made_again_is_excused_only_as_the_call_a_frozen_payer_was_inside(
    stack: amber.Stack,
) -> None:
    """The woken payer may note its call after the run that took over made it again
    (same key), when it began the step before it lost the analysis; never when the
    step was begun after, nor for two awake payers or one payer twice."""
    with _paid_step(stack, taken_first=False) as (aid, key):
        assert _inside(stack, aid, key, [222, 111], frozen={111})
        assert _inside(stack, aid, key, [111, 222], frozen={111})
        assert not _inside(stack, aid, key, [222, 333], frozen={111})
        assert not _inside(stack, aid, key, [111, 111], frozen={111})
        assert not _inside(stack, aid, key, [222, 444], frozen={444})  # 444 never lost it
        # a payer frozen at another time, not inside this step, is the one not excused
        assert _inside(stack, aid, key, [111, 222], frozen={111, 222})
        assert not _inside(stack, aid, key, [222, 444, 111], frozen={111, 444})
    with _paid_step(stack, taken_first=True) as (aid, key):
        assert not _inside(stack, aid, key, [222, 111], frozen={111})
