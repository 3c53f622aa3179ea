"""Runs, pauses and resumes that race or fail leave a state that can be retried."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

import amber
from amber import AnalysisStateError, ConsistencyError
from amber.agents import BaseAgent
from amber.examples import ANALYSTS, MarketDataClient
from amber.pause import PauseManager


class Slow(BaseAgent):
    agent_type = "slow_agent"
    subtasks = ("wait", "after")
    started = threading.Event()
    release = threading.Event()

    def run_subtask(self, name: str) -> Any:
        self.l1_cache.set(f"note:{name}", name)
        if name == "wait":
            Slow.started.set()
            Slow.release.wait(30)
        return name


def _slow_run(stack: amber.Stack) -> tuple[str, threading.Thread, list[Any]]:
    Slow.started.clear()
    Slow.release.clear()
    co = stack.coordinator.using()
    aid = co.start_analysis("AAPL", [Slow])
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(co.run(aid)))
    t.start()
    assert Slow.started.wait(30)
    return aid, t, out


def test_only_one_process_runs_an_analysis(stack: amber.Stack) -> None:
    aid, t, out = _slow_run(stack)
    try:
        with pytest.raises(AnalysisStateError, match="another process is running"):
            stack.coordinator.using().run(aid)
    finally:
        Slow.release.set()
        t.join(30)
    assert out[0]["slow_agent"].status == "completed"


def test_a_pause_during_a_subtask_keeps_its_work_as_paused(stack: amber.Stack) -> None:
    aid, t, out = _slow_run(stack)
    pm = PauseManager(stack.analyses, stack.coordinator.using())
    pm.pause(aid, "awaiting_review")
    Slow.release.set()
    t.join(30)
    assert out[0]["slow_agent"].status == "paused"
    cp = stack.checkpointer.restore_checkpoint(aid, "slow_agent").checkpoint
    assert cp.completed_subtasks == ["wait"]
    agent_id = stack.analyses.get(aid).agents[0]["agent_id"]
    mem = stack.memory(agent_id)
    assert mem.ttl("note:wait") > stack.settings.active_ttl  # the paused TTL
    assert stack.redis.ttl(stack.keys.checkpoint(agent_id)) > stack.settings.active_ttl
    with stack.pg.connection() as conn:
        row = conn.execute(
            "SELECT l1_snapshot IS NOT NULL FROM agent_checkpoints WHERE"
            " analysis_id = %s ORDER BY id DESC LIMIT 1",
            (aid,),
        ).fetchone()
    assert row == (True,)


def test_a_failed_resume_leaves_the_analysis_paused(stack: amber.Stack) -> None:
    market = MarketDataClient(quotas={"koyfin": 15})
    co = stack.coordinator.using(market)
    pm = PauseManager(stack.analyses, co)
    aid = co.start_analysis("AAPL", ANALYSTS)
    co.run(aid)
    strategy = next(
        a for a in stack.analyses.get(aid).agents if a["agent_type"] == "strategy_analyst"
    )
    k = stack.keys
    stack.redis.set(k.l1_snapshot(strategy["agent_id"]), b"garbage")
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE agent_checkpoints SET l1_snapshot = %s WHERE analysis_id = %s"
            " AND l1_snapshot IS NOT NULL",
            (b"garbage", aid),
        )
    stack.redis.delete(stack.memory(strategy["agent_id"]).key("aapl_historical_roi"))
    with pytest.raises(ConsistencyError):
        pm.resume(aid)
    assert stack.analyses.get(aid).status == "paused"
    assert pm.pauses(aid)[-1]["resumed_at"] is None


def test_session_versions_stay_exact(stack: amber.Stack) -> None:
    from amber.errors import ValidationError
    from amber.persistence import Session
    from amber.persistence.models import parse

    with pytest.raises(ValidationError, match="version"):
        parse(
            Session,
            {
                "session_id": f"s-{uuid.uuid4().hex[:6]}",
                "goal": "g",
                "status": "planning",
                "version": 2**53,
            },
        )
