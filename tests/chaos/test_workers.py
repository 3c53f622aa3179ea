"""Three ``amber worker`` processes over one queue, SIGKILLed and restarted at random.

The seed is printed; ``WORKERS_CHAOS_SEED=<seed>`` replays the same choices (which
worker dies, and when; process timing still varies). Afterwards every analysis must
have completed with the result an uninterrupted run computes, no step whose result
was recorded may have run again, only steps in flight in a killed worker may have run
twice, no two runs may have written one analysis's checkpoints at once, and every
analysis a killed worker was inside must have been taken over.
"""

from __future__ import annotations

import os
import random
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import amber
from tests.runtime import fleet, workapp
from tests.runtime.fleet import Fleet, audit, starts, wait_until

pytestmark = pytest.mark.chaos

SEED_VARIABLE = "WORKERS_CHAOS_SEED"
WORKERS = 3
ANALYSES = 20
KILLS = 6
SLEEP = 0.5
"""Seconds a step takes (times 0.5 to 1.5)."""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(
        fleet.new_tag(),
        tmp_path / "workers",
        concurrency=2,
        settings={"worker_poll": "0.1"},  # the default lease: no lapse on a loaded machine
    )
    try:
        yield f
    finally:
        f.close()


def test_workers_killed_at_random_lose_and_repeat_nothing(
    stack: amber.Stack, workers: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get(SEED_VARIABLE) or secrets.randbits(32))
    with capsys.disabled():
        print(f"\nworkers chaos seed {seed} (replay: {SEED_VARIABLE}={seed})", flush=True)
    rng = random.Random(seed)
    app, book = workapp.make_app(workers.tag), tmp_path / "ledger"
    workers.wait_ready([workers.start() for _ in range(WORKERS)])
    aids = fleet.submit(stack, app, ANALYSES, book, sleep=SLEEP)
    done = fleet.all_finished(stack, aids)
    names: dict[int, str] = {}
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.3, 1.5))
        if done():
            break
        alive = sorted(workers.alive(), key=lambda p: p.pid)
        victim = alive[rng.randrange(len(alive))]
        name = victim.name()  # None: killed while starting, before it could claim
        if name is not None:
            names[victim.pid] = name
        workers.kill(victim)
        workers.start()
    wait_until(done, 120, "all analyses complete", workers.alive())
    report = audit(stack, aids, book, died=workers.killed)
    summary = (
        f"seed {seed}: {len(workers.killed)} kills, {report.takeovers} takeovers,"
        f" {report.repeats} steps run again after a kill, {report.starts} starts"
        f" for {report.steps} steps"
    )
    with capsys.disabled():
        print(summary, file=sys.stderr, flush=True)
    assert report.problems() == {}, f"{summary}\n{report.problems()}\n{workers.report()}"
    assert report.steps == ANALYSES * len(workapp.KINDS) * workapp.STEPS
    assert len(workers.killed) >= 1, summary
    assert report.repeats <= len(workapp.KINDS) * report.takeovers, summary
    # an analysis a killed worker was inside (it started a step there) was either
    # completed by it, or taken over from it by the next run that claimed it
    for pid, name in names.items():
        for aid in {s.analysis_id for s in starts(book) if s.pid == pid}:
            after = fleet.next_claim(stack.analyses.timeline(aid), name)
            events = [(e["kind"], e["by"], e["detail"]) for e in stack.analyses.timeline(aid)]
            assert after is None or fleet.taken_over_from(after, name), (summary, name, events)
