"""Pause and resume: every recovery path, a real Redis restart, races, bad requests."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import amber
from amber import AnalysisNotFound, AnalysisStateError
from amber.agents import LeadCoordinator
from amber.cli import app
from amber.demo import expire_l1
from amber.engines.embedded import EmbeddedRedis, embedded_state, stop_embedded
from amber.examples import ANALYSTS, MarketDataClient
from amber.pause import PauseManager

from ..conftest import Engines


def _paused_analysis(stack: amber.Stack) -> tuple[str, LeadCoordinator, PauseManager]:
    market = MarketDataClient(quotas={"koyfin": 15})
    co = stack.coordinator.using(market)
    pm = PauseManager(stack.analyses, co)
    aid = co.start_analysis("AAPL", ANALYSTS)
    co.run(aid)
    paused = pm.current_pause(aid)
    assert paused is not None and paused.reason == "quota_exhausted"
    market.set_quota("koyfin", None)
    return aid, co, pm


def _agents(stack: amber.Stack, aid: str) -> list[str]:
    return [a["agent_id"] for a in stack.analyses.get(aid).agents]


def test_quota_pauses_with_dual_snapshots_14_day_ttls_and_a_record(stack: amber.Stack) -> None:
    aid, _, pm = _paused_analysis(stack)
    assert stack.analyses.get(aid).status == "paused"
    record = pm.pauses(aid)[-1]
    assert record["reason"] == "quota_exhausted" and record["resumed_at"] is None
    states = {a["agent_type"]: a for a in record["agents"]}
    assert states["strategy_analyst"]["completed"] == 1 and states["strategy_analyst"]["total"] == 4
    assert states["financial_analyst"]["total"] == 4  # stopped wherever it was: agents run at once
    paused = stack.settings.paused_ttl
    for a in stack.analyses.get(aid).agents:
        for key in (
            stack.keys.l1_snapshot_meta(a["agent_id"]),  # the snapshot's own hash exists
            stack.keys.checkpoint(a["agent_id"]),  # only when the memory has keys
        ):
            assert stack.settings.active_ttl < stack.redis.ttl(key) <= paused
        with stack.pg.connection() as conn:
            row = conn.execute(
                "SELECT l1_snapshot IS NOT NULL FROM agent_checkpoints WHERE analysis_id = %s"
                " AND agent_type = %s ORDER BY id DESC LIMIT 1",
                (aid, a["agent_type"]),
            ).fetchone()
        assert row == (True,)
    strategy = next(
        a for a in stack.analyses.get(aid).agents if a["agent_type"] == "strategy_analyst"
    )
    mem = stack.memory(strategy["agent_id"])
    assert stack.settings.active_ttl < mem.ttl("aapl_historical_roi") <= paused


def test_pause_twice_is_a_no_op_that_says_so(stack: amber.Stack) -> None:
    aid, _, pm = _paused_analysis(stack)
    again = pm.pause(aid, "awaiting_review")
    assert again.already_paused and "already paused" in again.message
    assert len(pm.pauses(aid)) == 1


def test_pause_unknown_or_finished_is_a_clear_error(stack: amber.Stack) -> None:
    pm = stack.pause_manager
    with pytest.raises(AnalysisNotFound):
        pm.pause("6f1c8a52-0000-4000-8000-000000000000", "x")
    with pytest.raises(amber.InvalidIdentifier):
        pm.pause("nope", "x")
    co = stack.coordinator.using()
    aid = co.start_analysis("AAPL", ANALYSTS)
    co.run(aid)
    with pytest.raises(AnalysisStateError, match="completed"):
        pm.pause(aid, "x")
    with pytest.raises(AnalysisStateError, match="completed"):
        pm.resume(aid)


@pytest.mark.parametrize("loss", ["nothing", "l1_expired", "redis_lost"])
def test_round_trip_through_every_recovery_path(stack: amber.Stack, loss: str) -> None:
    aid, co, pm = _paused_analysis(stack)
    agents = _agents(stack, aid)
    if loss == "l1_expired":
        expire_l1(stack, agents)
    elif loss == "redis_lost":  # everything of this analysis in Redis, gone
        expire_l1(stack, agents)
        stack.redis.delete(
            *[stack.keys.l1_snapshot(a) for a in agents],
            *[stack.keys.l1_snapshot_meta(a) for a in agents],
            *[stack.keys.checkpoint(a) for a in agents],
        )
    report = pm.resume(aid)
    expected = {
        "nothing": "l1_existing",
        "l1_expired": "redis_secondary",
        "redis_lost": "postgresql_checkpoint",
    }[loss]
    strategy = report.recovery["strategy_analyst"]
    assert strategy.path == expected and strategy.verified and strategy.keys > 0
    assert all(r.status == "completed" for r in report.results.values())
    assert co.market.duplicate_calls == 0 and co.reexecuted == 0
    assert stack.analyses.get(aid).status == "completed"
    assert pm.pauses(aid)[-1]["resumed_at"] is not None
    assert report.resumed and report.as_dict()["agents"]["strategy_analyst"]["path"] == expected


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path)
    server.ensure()
    yield server
    server.stop()


def test_resume_after_a_real_redis_restart(engines: Engines, own_redis: EmbeddedRedis) -> None:
    with amber.connect(own_redis.url, engines.database_url, prefix=engines.prefix) as stack:
        aid, co, pm = _paused_analysis(stack)
        pid = own_redis.pid()
        own_redis.stop()
        own_redis.ensure()  # restarted empty: no persistence
        assert own_redis.pid() != pid and stack.redis.dbsize() == 0
        report = pm.resume(aid)
        assert {r.path for r in report.recovery.values()} == {"postgresql_checkpoint"}
        assert co.market.duplicate_calls == 0 and co.reexecuted == 0
        assert stack.analyses.get(aid).status == "completed"


def _resume_in_child(analysis_id: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with amber.connect() as stack:
        report = stack.pause_manager.resume(analysis_id, by=f"pid {os.getpid()}", run=False)
        out.put(report.resumed)


def test_concurrent_resume_one_wins_the_other_is_told(stack: amber.Stack) -> None:
    aid, _, _ = _paused_analysis(stack)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_resume_in_child, args=(aid, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(out.get(timeout=5) for _ in procs) == [False, True]
    assert stack.analyses.get(aid).status == "running"


def test_gc_expires_a_pause_past_14_days(stack: amber.Stack) -> None:
    from datetime import timedelta

    from amber.checkpoints.model import now

    aid, _, _ = _paused_analysis(stack)
    assert aid in stack.retention.gc(at=now() + timedelta(days=14, hours=1)).expired
    assert stack.analyses.get(aid).status == "expired"
    with pytest.raises(AnalysisStateError, match="expired"):
        stack.pause_manager.resume(aid)


def test_cli_pause_resume_and_list(stack: amber.Stack) -> None:
    runner = CliRunner()
    co = stack.coordinator
    aid = co.start_analysis("AAPL", ANALYSTS[:1])
    result = runner.invoke(app, ["pause", aid, "--reason", "awaiting_review"])
    assert result.exit_code == 0 and "paused analysis" in result.output
    result = runner.invoke(app, ["analyses", "list", "--status", "paused"])
    assert aid in result.output and "financial_analyst: 0 of 4" in result.output
    result = runner.invoke(app, ["resume", aid])
    assert result.exit_code == 0, result.output
    assert "financial_analyst" in result.output and "4 of 4 subtasks, completed" in result.output
    result = runner.invoke(app, ["resume", aid])
    assert result.exit_code == 1 and "completed" in result.output


def _check_demo_report(report: dict) -> None:  # type: ignore[type-arg]
    assert report["status"] == "completed"
    assert report["duplicate_calls"] == 0 and report["subtasks_reexecuted"] == 0
    assert report["market_calls"] == 50 and report["calls_from_scratch"] > report["market_calls"]
    first, second = report["resumes"]
    assert first["agents"]["strategy_analyst"]["path"] == "redis_secondary"
    assert {a["path"] for a in second["agents"].values()} == {"postgresql_checkpoint"}
    assert all(a["verified"] for r in report["resumes"] for a in r["agents"].values())
    assert [e["event"] for e in report["timeline"]] == [
        "paused",
        "l1_expired",
        "paused",
        "redis_lost",
    ]


def test_demo_json_on_the_suite_servers(engines: Engines) -> None:
    result = CliRunner().invoke(app, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    _check_demo_report(report)
    assert "deleted" in report["timeline"][3]["how"]


def test_demo_json_on_fresh_embedded_engines(tmp_path: Path) -> None:
    env = {"AMBER_REDIS_URL": "", "AMBER_DATABASE_URL": "", "AMBER_DATA_DIR": str(tmp_path)}
    try:
        result = CliRunner().invoke(app, ["demo", "--json"], env=env)
        assert {s.name for s in embedded_state(tmp_path) if s.running} == {"redis", "postgresql"}
    finally:
        stop_embedded(tmp_path)  # the demo leaves the data directory's servers running
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    _check_demo_report(report)
    assert "restarted" in report["timeline"][3]["how"]
