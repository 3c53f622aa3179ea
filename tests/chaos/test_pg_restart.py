"""PostgreSQL restarted in the middle of a recovery, and a worker that loses it for seconds.

PostgreSQL is this module's own embedded server (in a temporary directory), so it can be
stopped and started; Redis is the suite's. The stack is opened once per test and never
replaced: its pool reconnects by itself. Nothing is run twice and no API call repeated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import amber
from amber import StoreUnavailable
from amber.agents import BaseAgent
from amber.engines.embedded import EmbeddedPostgres
from amber.examples import STOCK_ANALYSIS, MarketDataClient
from amber.examples import app as examples
from amber.memory.recovery import DualRecoveryStrategy, RecoveryReport

from ..conftest import Engines
from ..pause.test_pause_resume import _paused_analysis

OUTAGE = 3.0
"""Seconds PostgreSQL stays down in the worker test."""


@pytest.fixture(scope="module")
def own_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg-restart"))
    server.ensure()
    yield server
    server.stop()


@pytest.fixture
def stack(engines: Engines, own_pg: EmbeddedPostgres) -> Iterator[amber.Stack]:
    own_pg.ensure()  # up again if a test left it down
    with amber.connect(
        engines.redis_url, own_pg.url(), prefix=f"{engines.prefix}-pgr", connect_timeout=2
    ) as s:
        yield s


def restart(pg: EmbeddedPostgres) -> None:
    """Stop PostgreSQL (every connection to it is cut) and start it again."""
    pid = pg.pid()
    pg.stop()
    pg.ensure()
    assert pg.pid() != pid


def wait_for(check: Any, timeout: float = 60) -> Any:
    """``check()`` until it returns a true value, through ``StoreUnavailable``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
            if got:
                return got
        except StoreUnavailable:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{check} did not come true in {timeout:g}s")
        time.sleep(0.2)


class RestartAfterFirst:
    """The recovery strategy, restarting PostgreSQL once the first agent has recovered."""

    def __init__(self, inner: DualRecoveryStrategy, pg: EmbeddedPostgres, down: float) -> None:
        self.inner, self.pg, self.down = inner, pg, down
        self.recovered: list[str] = []
        self.comeback: threading.Timer | None = None
        """Starts PostgreSQL again after ``down``: joined before the test ends, so its
        start never overlaps the next test's restart."""

    def recover_agent_state(
        self,
        agent_id: str,
        analysis_id: object,
        agent_type: str,
        *args: Any,
    ) -> Any:
        report: RecoveryReport = self.inner.recover_agent_state(
            agent_id, analysis_id, agent_type, *args
        )
        self.recovered.append(agent_type)
        if len(self.recovered) == 1:
            if self.down:  # down for a while: the resume meets it down, not back
                self.pg.stop()
                self.comeback = threading.Timer(self.down, self.pg.ensure)
                self.comeback.start()
            else:
                restart(self.pg)
        return report


@pytest.mark.parametrize("down", [0.0, 2.0], ids=["restarted", "down-2s"])
def test_resume_across_a_postgres_restart_mid_recovery(
    stack: amber.Stack, own_pg: EmbeddedPostgres, down: float
) -> None:
    aid, co, pm = _paused_analysis(stack)
    pool = stack.pg
    hook = RestartAfterFirst(co.recovery, own_pg, down)
    co.recovery = hook  # type: ignore[assignment]
    try:
        report = pm.resume(aid)
    except StoreUnavailable as exc:  # amber's error, not the driver's
        assert not isinstance(exc, psycopg.Error)
        outcome = f"StoreUnavailable: {exc.message}"
    else:
        outcome = "completed" if report.resumed else report.message
    co.recovery = hook.inner
    if hook.comeback is not None:
        hook.comeback.join()
    wait_for(own_pg.pid)

    # not stuck: paused, or running with no live lease, and the same stack answers again
    t0 = time.monotonic()
    status = wait_for(lambda: stack.analyses.get(aid).status)
    assert status in ("paused", "running", "completed")
    if status != "completed":
        wait_for(lambda: not stack.analyses.has_runner(aid), timeout=stack.settings.lease_seconds)
    print(
        f"\nPostgreSQL {'down' if down else 'restarted'} after the first recovery: {outcome};"
        f" then {status}, no live lease {time.monotonic() - t0:.1f}s after it answered again"
    )
    if status != "completed":
        again = pm.resume(aid)
        assert again.resumed, again.message
    assert stack.pg is pool
    assert stack.analyses.get(aid).status == "completed"
    assert co.market is not None
    assert co.market.duplicate_calls == 0 and co.reexecuted == 0  # type: ignore[attr-defined]


def test_a_worker_that_loses_postgres_resumes_when_it_returns(
    stack: amber.Stack, own_pg: EmbeddedPostgres
) -> None:
    market = MarketDataClient()
    worker = examples.worker(stack, concurrency=1)
    worker.coordinator = examples.coordinator(stack, market)
    started: list[str] = []
    comeback = threading.Timer(OUTAGE, own_pg.ensure)

    def on_start(agent: BaseAgent, name: str) -> None:
        started.append(f"{agent.agent_type}.{name}")
        if len(started) == 3:  # PostgreSQL goes away for a while under a running analysis
            own_pg.stop()
            comeback.start()

    worker.coordinator.on_subtask_start = on_start
    aid = examples.submit(stack, STOCK_ANALYSIS, ticker="AAPL")
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        wait_for(lambda: own_pg.pid() is None or len(started) > 3)
        wait_for(own_pg.pid)
        wait_for(lambda: stack.analyses.get(aid).status == "completed", timeout=120)
    finally:
        worker.stop()
        thread.join(60)
        if comeback.is_alive():
            comeback.join()  # its start must not overlap the next test's restart
    assert not thread.is_alive()
    print(
        f"\nworker: PostgreSQL down {OUTAGE:g}s at the 3rd step; {worker.stats.errors} run(s)"
        f" stopped, {worker.stats.claimed} claim(s), {len(started)} step starts"
    )
    # either its run failed on the lost server and it claimed the analysis again, or the
    # run's next statement met the server shutting down (it answers, so the pool waits
    # for a connection) and went on once PostgreSQL was back: both are fine
    assert worker.stats.claimed == worker.stats.errors + 1
    assert market.duplicate_calls == 0 and worker.coordinator.reexecuted == 0
    results = stack.analyses.results(aid)
    assert len(results) == 3 and {r["status"] for r in results} == {"completed"}


def _submitted_after_a_restart(stack: amber.Stack, own_pg: EmbeddedPostgres) -> str:
    """Take the liveness lock, restart PostgreSQL (which frees it), then submit an
    analysis: the pool's first statement meets a cut connection and reconnects."""
    first = examples.submit(stack, STOCK_ANALYSIS, ticker="AAPL")
    with stack.analyses.runner_lock(first):  # the liveness lock is taken
        pass
    restart(own_pg)
    return str(wait_for(lambda: examples.submit(stack, STOCK_ANALYSIS, ticker="AAPL")))


def test_a_lease_claimed_right_after_a_restart_is_held_by_a_live_process(
    stack: amber.Stack, own_pg: EmbeddedPostgres
) -> None:
    """The restart freed this process's liveness lock; a claim must take it again, or the
    lease it writes names a lock nobody holds and any other process could claim it too."""
    leases = stack.analyses.leases
    aid = _submitted_after_a_restart(stack, own_pg)
    owner = "test:claim-after-restart"
    assert leases.claim(aid, owner) is not None
    try:
        assert stack.analyses.has_runner(aid)
        assert leases.claim(aid, "test:another-process") is None
    finally:
        leases.release(aid, owner)


def test_a_worker_claim_right_after_a_restart_is_held_by_a_live_process(
    stack: amber.Stack, own_pg: EmbeddedPostgres
) -> None:
    """A worker's claim checks the liveness lock inside its own statement (no round trip
    of its own): after a restart freed the lock, the statement sees it gone, the lock is
    taken again, and the lease names a live lock that no other process can claim past."""
    leases = stack.analyses.leases
    aid = _submitted_after_a_restart(stack, own_pg)
    known = [e["agent_type"] for e in stack.analyses.get(aid).agents]
    owner = "test:claim-next-after-restart"
    claims = leases.claim_next(owner, 50, known)
    try:
        assert aid in {c.analysis_id for c in claims}
        for c in claims:
            assert stack.analyses.has_runner(c.analysis_id)
        assert leases.claim_next("test:another-worker", 50, known) == []
    finally:
        for c in claims:
            leases.release(c.analysis_id, c.owner)


def test_a_lease_whose_lock_went_with_the_server_is_not_taken_over_at_once(
    stack: amber.Stack, engines: Engines, own_pg: EmbeddedPostgres
) -> None:
    """A restart (or a standby promoted in the primary's place) frees every liveness lock:
    a missing lock then proves nothing, so a live run's lease is not anyone's to take.
    Its run renews it on the new server (its lock taken again); a run that died with the
    old server is taken over when its lease expires; a run that dies after renewing is
    taken over at once, as before."""
    leases = stack.analyses.leases
    aid = examples.submit(stack, STOCK_ANALYSIS, ticker="AAPL")
    owner = "test:live-through-a-restart"
    assert leases.claim(aid, owner) is not None
    with amber.connect(
        engines.redis_url, own_pg.url(), prefix=f"{engines.prefix}-pgr", connect_timeout=2
    ) as other:  # another process: its own pool and liveness lock
        try:
            restart(own_pg)
            taker = other.analyses.leases
            # the lease's lock went with the old server: that proves nothing
            assert wait_for(lambda: [taker.claim(aid, "test:taker")]) == [None]
            assert other.analyses.has_runner(aid)
            wait_for(lambda: leases.renew() or True)  # the run renews on the new server
            assert taker.claim(aid, "test:taker") is None
            leases.liveness.close()  # now the run's process dies: its lock goes, here
            # as soon as the server has ended that session (it does so after the client
            # has gone, not before close returns): well before the lease would expire
            half = stack.settings.lease_seconds / 2
            assert wait_for(lambda: taker.claim(aid, "test:taker"), timeout=half) is not None
            taker.release(aid, "test:taker")
        finally:
            wait_for(lambda: leases.release(aid, owner) or True)


def test_a_run_that_died_with_the_old_server_is_taken_over_when_its_lease_expires(
    stack: amber.Stack, engines: Engines, own_pg: EmbeddedPostgres
) -> None:
    """A run whose process died with the old server never renews on the new one: its
    analysis is not taken at once (its missing lock proves nothing), but once its lease
    row expires (``stuck_seconds``; moved into the past here) it is."""
    aid = examples.submit(stack, STOCK_ANALYSIS, ticker="AAPL")
    with amber.connect(
        engines.redis_url, own_pg.url(), prefix=f"{engines.prefix}-pgr", connect_timeout=2
    ) as dying:
        assert dying.analyses.leases.claim(aid, "test:dies-with-the-server") is not None
        dying.analyses.leases.close()  # no heartbeat, no lock: its process is gone
        restart(own_pg)  # and so is the server that saw its lock
    taker = stack.analyses.leases
    assert wait_for(lambda: [taker.claim(aid, "test:taker")]) == [None]

    def expire() -> bool:
        with stack.pg.connection() as conn:
            conn.execute(
                "UPDATE analyses SET lease_expires = NOW() - INTERVAL '1 second'"
                " WHERE analysis_id = %s",
                (aid,),
            )
        return True

    wait_for(expire)
    claim = taker.claim(aid, "test:taker")
    assert claim is not None and claim.prior == "test:dies-with-the-server"
    taker.release(aid, "test:taker")
