"""``amber worker`` processes sharing a queue: killed, stopped, starved of connections.

Each test has an app of its own (``WORKAPP_TAG``), so its workers claim only its
analyses. The ledger and the checkpoints say what ran where (``tests.runtime.fleet``).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import amber
from amber import defaults
from tests.conftest import Engines
from tests.runtime import fleet, workapp
from tests.runtime.fleet import Fleet, audit, starts, wait_until
from tests.runtime.proxy import Proxy

SETTINGS = {"worker_poll": "0.1"}
"""The default lease (10 s): a dead worker's leases go with its liveness lock, at once;
a long lease keeps a worker starved of CPU on a loaded machine from losing its own."""
OUTAGE_LEASE = 3.0
OUTAGE = 4.5
"""Seconds the servers are cut off: longer than a lease, so the runs lose theirs."""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(fleet.new_tag(), tmp_path / "workers", concurrency=3, settings=dict(SETTINGS))
    try:
        yield f
    finally:
        f.close()


def test_two_workers_share_a_queue_and_run_each_step_once(
    stack: amber.Stack, workers: Fleet, tmp_path: Path
) -> None:
    app, book = workapp.make_app(workers.tag), tmp_path / "ledger"
    procs = [workers.start(), workers.start()]
    workers.wait_ready(procs)
    aids = fleet.submit(stack, app, 12, book, sleep=0.05)
    wait_until(fleet.all_finished(stack, aids), 120, "all analyses complete", procs)
    for p in procs:
        assert workers.terminate(p) == 0, p.stderr()
        assert "stopped:" in p.stdout()
    report = audit(stack, aids, book, died=set())
    assert report.problems() == {}, workers.report()
    assert report.starts == report.steps == 12 * 2 * workapp.STEPS  # no step ran twice
    assert {s.pid for s in starts(book)} == {p.pid for p in procs}  # both did work
    for aid in aids:  # one run each, start to end
        kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
        assert kinds == ["submitted", "claimed", "completed"], (aid, kinds)
        assert len(report.claims[aid]) == 1


def test_a_sigkilled_worker_s_analyses_are_taken_over(
    stack: amber.Stack, workers: Fleet, tmp_path: Path
) -> None:
    app, book = workapp.make_app(workers.tag), tmp_path / "ledger"
    procs = [workers.start(), workers.start()]
    workers.wait_ready(procs)
    aids = fleet.submit(stack, app, 12, book, sleep=0.2)
    victim, other = procs

    def victim_mid_run() -> bool:
        return sum(1 for s in starts(book) if s.pid == victim.pid) >= 4

    wait_until(victim_mid_run, 60, "the victim runs steps", procs)
    name = victim.name()
    assert name
    workers.kill(victim)
    wait_until(fleet.all_finished(stack, aids), 120, "all analyses complete", [other])
    report = audit(stack, aids, book, died={victim.pid})
    assert report.problems() == {}, workers.report()
    # the analyses the victim was inside when it died were taken over from it
    inside = set()
    for aid in {s.analysis_id for s in starts(book) if s.pid == victim.pid}:
        after = fleet.next_claim(stack.analyses.timeline(aid), name)
        assert after is None or fleet.taken_over_from(after, name), (aid, after)
        if after is not None:
            inside.add(aid)
    assert inside, "the kill landed between runs; nothing was taken over"
    assert report.takeovers >= len(inside)
    # at most the step in flight at the kill ran again, once per agent of each analysis
    assert report.repeats <= 2 * len(inside)


def test_sigterm_hands_the_work_back_at_the_next_step(
    stack: amber.Stack, workers: Fleet, tmp_path: Path
) -> None:
    app, book = workapp.make_app(workers.tag), tmp_path / "ledger"
    workers.concurrency = 2
    first = workers.start()
    workers.wait_ready([first])
    name = first.name()
    aids = fleet.submit(stack, app, 4, book, sleep=0.5)
    wait_until(lambda: len(starts(book)) >= 2, 60, "the worker runs steps", [first])
    assert workers.terminate(first) == 0, first.stderr()
    assert "stopped:" in first.stdout()
    released = [
        aid for aid in aids if any(e["kind"] == "released" for e in stack.analyses.timeline(aid))
    ]
    assert released, "no run was handed back"
    for aid in released:
        assert stack.analyses.get(aid).status == "running"
        assert not stack.analyses.has_runner(aid)
        assert any(e["by"].startswith(f"{name}:") for e in stack.analyses.timeline(aid))
    # every step the stopped worker started was finished and recorded before it left
    mine = [s for s in starts(book) if s.pid == first.pid]
    second = workers.start()
    wait_until(fleet.all_finished(stack, aids), 120, "all analyses complete", [second])
    report = audit(stack, aids, book, died=set())
    assert report.problems() == {}, workers.report()
    assert report.repeats == 0 and report.starts == report.steps
    tokens = {(r["agent_type"], t) for aid in aids for r in stack.analyses.results(aid)
              for t in r["result"]["tokens"]}  # fmt: skip
    assert all((s.agent_type, s.token) in tokens for s in mine)
    for aid in released:
        kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
        assert kinds[-1] == "completed" and kinds.count("claimed") == 2, kinds


def test_eight_runs_at_once_share_two_pooled_connections(
    engines: Engines, stack: amber.Stack, tmp_path: Path
) -> None:
    tag = fleet.new_tag()
    app, book = workapp.make_app(tag), tmp_path / "ledger"
    aids = fleet.submit(stack, app, 8, book, sleep=0.2)
    small = amber.connect(
        engines.redis_url, engines.database_url, prefix=engines.prefix, pg_pool_max=2,
        worker_poll=0.1,
    )  # fmt: skip
    try:
        assert small.pg.max_size == 2
        worker = app.worker(small, concurrency=8)
        done = fleet.all_finished(stack, aids)
        thread = threading.Thread(target=worker.run, kwargs={"until": done}, daemon=True)
        thread.start()
        widest = 0
        deadline = time.monotonic() + 120
        while thread.is_alive() and time.monotonic() < deadline:
            widest = max(widest, len(worker.running()))
            time.sleep(0.01)
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        small.close()
    assert worker.stats.errors == 0 and worker.stats.claimed == 8
    assert widest == 8  # all eight ran at once
    report = audit(stack, aids, book, died=set())
    assert report.problems() == {}
    assert report.repeats == 0


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("nosuchmodule:app", "could not be imported"),
        (f"{fleet.APP.partition(':')[0]}:nothing", "has no attribute"),
    ],
)
def test_a_worker_of_an_app_that_is_not_there_says_so_in_one_line(target: str, says: str) -> None:
    cli = fleet.run_cli("worker", "--app", target, env=fleet.cli_env("absent"))
    assert cli.returncode == 1, (cli.stdout, cli.stderr)
    lines = [line for line in (cli.stdout + cli.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert says in lines[0] and "Traceback" not in cli.stderr


def _unix_socket(url: str, kind: str) -> str | None:
    """The unix socket a Redis URL or PostgreSQL conninfo names, if it names one."""
    if kind == "redis":
        return url.removeprefix("unix://").partition("?")[0] if url.startswith("unix://") else None
    host = str(conninfo_to_dict(url).get("host") or "")
    if not host.startswith("/"):
        return None
    found = sorted(Path(host).glob(".s.PGSQL.*"))
    found = [p for p in found if not p.name.endswith(".lock")]
    return str(found[0]) if found else None


def test_a_worker_rides_out_a_moment_without_its_servers(
    engines: Engines, stack: amber.Stack, workers: Fleet, tmp_path: Path
) -> None:
    redis_sock = _unix_socket(engines.redis_url, "redis")
    pg_sock = _unix_socket(engines.database_url, "postgresql")
    if redis_sock is None or pg_sock is None:
        pytest.skip("the proxy forwards unix sockets; these servers are reached over TCP")
    home = Path(tempfile.mkdtemp(prefix="amber-proxy-", dir="/tmp"))  # short socket paths
    redis_proxy = Proxy(home / "redis.sock", redis_sock)
    pg_proxy = Proxy(home / Path(pg_sock).name, pg_sock)
    try:
        workers.settings["lease_seconds"] = str(OUTAGE_LEASE)
        workers.env_override = {
            "AMBER_REDIS_URL": f"unix://{home / 'redis.sock'}",
            "AMBER_DATABASE_URL": make_conninfo(engines.database_url, host=str(home)),
        }
        app, book = workapp.make_app(workers.tag), tmp_path / "ledger"
        proc = workers.start()
        workers.wait_ready([proc])
        aids = fleet.submit(stack, app, 6, book, sleep=0.3)
        wait_until(lambda: len(starts(book)) >= 3, 60, "the worker runs steps", [proc])
        redis_proxy.cut()
        pg_proxy.cut()
        time.sleep(OUTAGE)
        assert proc.popen.poll() is None, proc.stderr()
        redis_proxy.restore()
        pg_proxy.restore()
        wait_until(fleet.all_finished(stack, aids), 120, "all analyses complete", [proc])
        assert workers.terminate(proc) == 0, proc.stderr()
    finally:
        redis_proxy.close()
        pg_proxy.close()
        shutil.rmtree(home, ignore_errors=True)
    assert pg_proxy.dropped > 0 and redis_proxy.dropped > 0
    report = audit(stack, aids, book, died={proc.pid})  # steps in flight may run again
    assert report.problems() == {}, proc.stderr()


def test_a_worker_never_claims_again_an_analysis_it_is_still_running(
    stack: amber.Stack, engines: Engines, tmp_path: Path
) -> None:
    """A lease can lapse in the database while its run is inside a step (PostgreSQL was
    away for longer than a lease). The worker must not claim that analysis again beside
    the run: the new claim would carry the same owner, the fence could not tell the two
    runs apart, and the step would run twice at once."""
    app, book = workapp.make_app(fleet.new_tag()), tmp_path / "ledger"
    (aid,) = fleet.submit(stack, app, 1, book, sleep=0.05)
    with stack.pg.connection() as conn:  # each agent's first step takes 1.5 to 4.5 s
        conn.execute(
            "UPDATE analyses SET input = input || '{\"first\": 3.0}'::jsonb WHERE analysis_id = %s",
            (aid,),
        )
    own = amber.connect(  # a long lease: its heartbeat will not renew it in time
        engines.redis_url, engines.database_url, prefix=engines.prefix,
        lease_seconds=30, worker_poll=0.05,
    )  # fmt: skip
    worker = app.worker(own, concurrency=2)
    done = fleet.all_finished(stack, [aid])
    thread = threading.Thread(target=worker.run, kwargs={"until": done}, daemon=True)
    try:
        thread.start()
        wait_until(lambda: len(starts(book)) >= 2, 60, "both agents run their first step")
        with stack.pg.connection() as conn:  # the lease lapses, as after an outage
            conn.execute(
                "UPDATE analyses SET lease_expires = NOW() - interval '1 second'"
                " WHERE analysis_id = %s",
                (aid,),
            )
        wait_until(done, 60, "the analysis completes")
    finally:
        worker.stop()
        thread.join(timeout=60)
        own.close()
    seen = [(s.agent_type, s.step) for s in starts(book)]
    assert len(seen) == len(set(seen)), seen  # no step started twice
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert kinds == ["submitted", "claimed", "completed"], kinds
    assert worker.stats.claimed == 1 and worker.stats.errors == 0
    assert audit(stack, [aid], book, died=set()).problems() == {}


def test_an_analysis_no_live_worker_can_run_says_so(
    stack: amber.Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose app lacks one of an analysis's agents leaves it (right: another
    worker may have the code) but says so, once; the status says what it waits for."""
    import logging
    import uuid

    from amber.runtime import status

    tag = uuid.uuid4().hex[:8]
    full, partial = amber.App(f"full_{tag}"), amber.App(f"partial_{tag}")
    writer, ghost = f"writer_{tag}", f"ghostwriter_{tag}"
    for app in (full, partial):
        app.agent(lambda ctx: 1, name=writer)
    full.agent(lambda ctx: 2, name=ghost)
    aid = full.submit(stack, [writer, ghost], {})
    assert status.summary(stack, stack.analyses.get(aid))["state"].startswith(
        "running (queued"
    )  # no worker alive at all: it simply waits for one
    worker = partial.worker(stack, 1)
    runner = threading.Thread(target=worker.run, daemon=True)
    with caplog.at_level(logging.WARNING, logger="amber.worker"):
        runner.start()
        try:
            wait_until(
                lambda: bool(stack.analyses.unserved(aid)), 20, "the worker to say it is alive"
            )
            shown = status.summary(stack, stack.analyses.get(aid))
            assert shown["state"] == f"running (waiting: no live worker registers agent '{ghost}')"
            assert shown["unserved"] == [ghost]
            assert ghost in stack.analyses.unserved_anywhere()  # amber status says it too
            time.sleep(defaults.WORKER_SEEN_EVERY + 0.5)  # it says alive again: logs no more
        finally:
            worker.stop()
            runner.join(timeout=30)
    told = [r.getMessage() for r in caplog.records if aid in r.getMessage()]
    assert len(told) == 1 and f"registers no agent '{ghost}'" in told[0], told
    assert stack.analyses.get(aid).status == "running"  # left, not claimed
    assert stack.analyses.unserved(aid) == []  # the worker stopped: no live worker now
