"""Liveness a busy interpreter cannot fake, and no hot loops.

A step that holds the GIL in one C call for longer than the lease stops its process's
heartbeat; the process's liveness lock in PostgreSQL still says it is alive, so no other
worker takes the analysis over before the (much longer) stuck bound, and the step runs
once. A run that fails on an error that will not change by itself is left alone for a
while, longer each time, and said once.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import amber
from amber.errors import StoreUnavailable
from amber.runtime import worker as worker_module
from tests.runtime import fleet, workapp
from tests.runtime.fleet import Fleet, audit, starts, wait_until

from ..conftest import Engines

LEASE = 1.0
STUCK = 30.0
"""A stuck bound far above the step, so a machine starved of CPU cannot make it lapse."""
BUSY = 2.5
"""Seconds the first step holds the GIL: two and a half leases, well inside the stuck
bound. (Before the stuck bound, a lease lapsed after one lease length of silence, and
the idle worker took the analysis over while the step was still running.)"""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Fleet]:
    settings = {"worker_poll": "0.1", "lease_seconds": str(LEASE), "stuck_seconds": str(STUCK)}
    with Fleet(fleet.new_tag(), tmp_path / "workers", concurrency=2, settings=settings) as f:
        yield f


def test_a_step_holding_the_gil_past_its_lease_is_not_taken_over(
    stack: amber.Stack, workers: Fleet, tmp_path: Path
) -> None:
    app, book = workapp.make_app(workers.tag), tmp_path / "ledger"
    first = workers.start()
    workers.wait_ready([first])
    aid = app.submit(
        stack, workapp.DEFINITION, {"ledger": str(book), "sleep": 0.0, "busy": BUSY}, preserve=True
    )
    wait_until(lambda: any(s.analysis_id == aid for s in starts(book)), 60, "a start", [first])
    second = workers.start()  # idle, polling every 0.1 s while the first one is busy
    workers.wait_ready([second])
    wait_until(fleet.all_finished(stack, [aid]), 60, "the analysis completes", [first, second])
    report = audit(stack, [aid], book, died=set())
    assert report.problems() == {}, workers.report()
    assert report.starts == report.steps == 2 * workapp.STEPS  # the busy step ran once
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert kinds == ["submitted", "claimed", "completed"], kinds


def test_a_run_that_keeps_failing_backs_off_and_says_so_once(
    stack: amber.Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = amber.App(f"t{fleet.new_tag()}")

    @app.agent(name=f"stubborn_{fleet.new_tag()}", steps=["s"])
    def stubborn(ctx: Any) -> int:
        return 1

    aid = app.submit(stack, [stubborn])
    w = app.worker(stack, concurrency=1)
    claims: list[float] = []

    def fails(claim: Any, shutdown: Any = None) -> Any:
        claims.append(time.monotonic())
        raise StoreUnavailable("the agent's write-ahead log is locked by another process")

    monkeypatch.setattr(w.coordinator, "run_claimed", fails)
    monkeypatch.setattr(worker_module, "BACKOFF_FIRST", 0.4)
    runner = threading.Thread(target=w.run, daemon=True)
    runner.start()
    time.sleep(2.5)
    w.stop()
    runner.join(timeout=30)
    # 0, 0.4, 1.2, 2.8 s: a handful of tries, not thousands
    assert 2 <= len(claims) <= 4, claims
    gaps = [b - a for a, b in itertools.pairwise(claims)]
    assert all(later > earlier for earlier, later in itertools.pairwise(gaps)), gaps
    events = [e for e in stack.analyses.timeline(aid) if e["kind"] == "backing_off"]
    assert len(events) == 1 and "locked" in events[0]["detail"]["error"]


def test_a_frozen_worker_holding_a_wal_lock_costs_a_few_claims_not_a_loop(
    stack: amber.Stack, tmp_path: Path
) -> None:
    """``wal`` mode: the frozen worker keeps its agents' log locks; the worker that takes
    the analysis over cannot open them, backs off (said once), and finishes once the
    woken worker, fenced off, lets them go."""
    import signal

    settings = {
        "worker_poll": "0.1",
        "lease_seconds": "0.5",
        "stuck_seconds": "1.0",
        "durability": "wal",
        "data_dir": str(tmp_path / "data"),  # both workers on one machine share the logs
    }
    workers = Fleet(fleet.new_tag(), tmp_path / "workers", concurrency=1, settings=settings)
    try:
        app, book = workapp.make_app(workers.tag), tmp_path / "ledger"
        frozen = workers.start()
        workers.wait_ready([frozen])
        doc = {"ledger": str(book), "sleep": 0.6, "memory": True}
        aid = app.submit(stack, workapp.DEFINITION, doc, preserve=True)
        wait_until(lambda: len(starts(book)) >= 1, 60, "a step starts", [frozen])
        frozen.popen.send_signal(signal.SIGSTOP)
        other = workers.start()
        workers.wait_ready([other])
        time.sleep(4.0)  # the other worker tries, and backs off, while this one is frozen
        claims_while_frozen = sum(
            1 for e in stack.analyses.timeline(aid) if e["kind"] in ("claimed", "taken_over")
        )
        frozen.popen.send_signal(signal.SIGCONT)
        wait_until(fleet.all_finished(stack, [aid]), 90, "the analysis completes", [other])
    finally:
        workers.close()
    assert claims_while_frozen <= 6, stack.analyses.timeline(aid)
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert kinds.count("backing_off") <= 1 and kinds[-1] == "completed", kinds
    report = audit(stack, [aid], book, died={frozen.pid})
    assert report.problems() == {}, workers.report()
    assert all(r["result"]["memory_ok"] for r in stack.analyses.results(aid))


def test_the_liveness_lock_outlives_a_server_idle_session_timeout(engines: Engines) -> None:
    """The liveness connection is idle by design: a server that ends idle sessions
    (``idle_session_timeout``, here 200 ms for every session of the pool) would end it and
    free the lock while the process runs, making its runs claimable. It turns the timeout
    off for its own session, so the lock is held by the same backend a second later."""
    from psycopg_pool import ConnectionPool

    from amber.runtime.leases import IDLE_TIMEOUT_SINCE, Leases

    with psycopg.connect(engines.database_url) as conn:
        if conn.info.server_version < IDLE_TIMEOUT_SINCE:
            pytest.skip("idle_session_timeout is PostgreSQL 14's")
    pool = ConnectionPool(
        engines.database_url, kwargs={"options": "-c idle_session_timeout=200"}, open=True
    )
    leases = Leases(pool, lease_seconds=5)
    try:
        key, pid = leases.liveness.held()
        time.sleep(1.0)
        assert leases.liveness.held(ping=True) == (key, pid)
    finally:
        leases.close()
        pool.close()
