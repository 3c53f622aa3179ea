"""A Redis loss costs at most the step in flight, and never a silent wrong result.

Each test runs the three analysts part of the way, stops the run as a crash would
(an exception out of the run, between two steps: nothing is in flight), deletes
every Redis key of the analysis's agents, and resumes in a fresh coordinator. The
default durability rebuilds each agent's memory from PostgreSQL and repeats no call;
``hybrid`` rolls back to the newest checkpoint whose memory it can rebuild and says
so (or pauses, with ``on_memory_lost="pause"``). Every finished analysis must have
the results of an uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import amber
from amber import MemoryRollbackRefused
from amber.agents import BaseAgent
from amber.examples import ANALYSTS, MarketDataClient
from amber.pause import PauseManager

from ..conftest import Engines, on_cluster


class Crash(BaseException):
    """Stands for a SIGKILL between two steps: out of the run, past every handler."""


def _stack(engines: Engines, **settings: Any) -> amber.Stack:
    return amber.connect(engines.redis_url, engines.database_url, prefix=engines.prefix, **settings)


@pytest.fixture
def hybrid(engines: Engines) -> Iterator[amber.Stack]:
    with _stack(engines, durability="hybrid") as s:
        yield s


def _results(stack: amber.Stack, aid: str) -> dict[str, Any]:
    return {r["agent_type"]: r["result"] for r in stack.analyses.results(aid)}


def _reference(stack: amber.Stack) -> dict[str, Any]:
    co = stack.coordinator.using(MarketDataClient())
    aid = co.start_analysis("AAPL", ANALYSTS)
    co.run(aid)
    return _results(stack, aid)


def _crash_at(stack: amber.Stack, aid: str, market: MarketDataClient, after: int) -> None:
    """Run ``aid`` until ``after`` subtasks have started in all, then crash the run."""
    co = stack.coordinator.using(market)
    started = 0

    def on_start(agent: BaseAgent, subtask: str) -> None:
        nonlocal started
        started += 1
        if started > after:
            raise Crash(subtask)

    co.on_subtask_start = on_start
    with pytest.raises(Crash):
        co.run(aid)


def lose_redis(stack: amber.Stack, aid: str) -> int:
    """Delete every Redis key of the analysis's agents: memory, secondary, backups."""
    doomed: list[bytes] = []
    for a in stack.analyses.get(aid).agents:
        doomed += stack.redis.scan_iter(match=f"{stack.keys.prefix}:*{a['agent_id']}*")
    for key in doomed:
        stack.redis.delete(key)
    return len(doomed)


def _resume(stack: amber.Stack, aid: str, market: MarketDataClient) -> amber.pause.ResumeReport:
    co = stack.coordinator.using(market)
    return PauseManager(stack.analyses, co).resume(aid)


def test_default_rebuilds_every_memory_from_postgresql_and_repeats_no_call(
    stack: amber.Stack,
) -> None:
    assert stack.settings.durability == "checkpoint"
    reference = _reference(stack)
    market = MarketDataClient()
    aid = stack.coordinator.start_analysis("AAPL", ANALYSTS)
    _crash_at(stack, aid, market, after=7)
    assert lose_redis(stack, aid) > 0
    report = _resume(stack, aid, market)
    assert report.resumed
    paths = {t: r.path for t, r in report.recovery.items()}
    assert set(paths.values()) <= {"postgresql_checkpoint", "empty"}, paths
    assert "postgresql_checkpoint" in paths.values()
    assert all(r.verified for r in report.recovery.values() if r.path != "empty")
    assert market.duplicate_calls == 0, market.ledger
    assert stack.analyses.get(aid).status == "completed"
    assert _results(stack, aid) == reference
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert "rolled_back" not in kinds


@pytest.mark.skipif(on_cluster(), reason="a cluster client applies staged writes before the save")
def test_default_step_whose_deferred_writes_redis_lost_is_recovered_not_run_again(
    stack: amber.Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis loses an agent's memory while a step's writes wait in a deferred batch for
    its save: the checkpoint commits with them, the save says working memory did not take
    them, and the run recovers that memory from the checkpoint and goes on. No step runs
    twice, no call is repeated, and the results are an uninterrupted run's."""
    reference = _reference(stack)
    market = MarketDataClient()
    aid = stack.coordinator.start_analysis("AAPL", ANALYSTS)
    checkpointer = type(stack.checkpointer)
    real = checkpointer.save_checkpoint
    lost: list[str] = []

    def save(self: Any, agent: Any, *args: Any, **kwargs: Any) -> Any:
        if agent.l1_cache.staged and not lost:
            lost.append(agent.agent_id)
            for key in stack.redis.scan_iter(match=f"{stack.keys.prefix}:*{agent.agent_id}*"):
                stack.redis.delete(key)
        return real(self, agent, *args, **kwargs)

    monkeypatch.setattr(checkpointer, "save_checkpoint", save)
    co = stack.coordinator.using(market)
    co.run(aid)
    assert lost
    assert "with the writes deferred to it" in caplog.text  # the save said so; recovered
    assert co.reexecuted == 0 and market.duplicate_calls == 0, market.ledger
    assert stack.analyses.get(aid).status == "completed"
    assert _results(stack, aid) == reference


def test_default_save_alone_leaves_the_memory_restorable_from_postgresql(
    stack: amber.Stack,
) -> None:
    """100 keys saved by a default checkpoint come back from PostgreSQL with Redis wiped."""
    aid = stack.coordinator.start_analysis("AAPL", ANALYSTS[:1])
    with stack.analyses.runner_lock(aid) as claim:  # a save is a run's: it holds the lease
        agents, _ = stack.coordinator.prepare_agents(
            stack.analyses.get(aid), claim.owner, token=claim.token
        )
        agent = agents[0]
        with agent.l1_cache.batch() as b:
            for i in range(100):
                b.set(f"k{i}", f"value {i}" * 10)
        agent.complete(agent.subtasks[0], {"ok": True})
        stack.checkpointer.save_checkpoint(agent, agent.subtasks[0])
    before = stack.snapshotter.take(agent.agent_id)
    assert lose_redis(stack, aid) > 0
    stack.snapshotter.forget(agent.agent_id)
    again, reports = stack.coordinator.prepare_agents(stack.analyses.get(aid))
    assert reports[agent.agent_type].path == "postgresql_checkpoint"
    after = stack.snapshotter.take(agent.agent_id)
    assert len(after.memory) == 100 and after.hash == before.hash
    assert again[0].completed_subtasks == [agent.subtasks[0]]


def test_hybrid_rolls_back_to_the_start_and_says_so(hybrid: amber.Stack) -> None:
    reference = _reference(hybrid)
    market = MarketDataClient()
    aid = hybrid.coordinator.start_analysis("AAPL", ANALYSTS)
    _crash_at(hybrid, aid, market, after=7)
    lose_redis(hybrid, aid)
    report = _resume(hybrid, aid, market)
    rolled = {t: r for t, r in report.recovery.items() if r.path == "rolled_back"}
    assert rolled, {t: r.path for t, r in report.recovery.items()}
    for r in rolled.values():
        assert r.rolled_back_to == 0 and r.rolled_back_from and r.rerun
    assert "empty" not in {r.path for r in report.recovery.values()}  # each has checkpoints
    events = [e for e in hybrid.analyses.timeline(aid) if e["kind"] == "rolled_back"]
    assert {e["detail"]["agent_type"] for e in events} == set(rolled)
    assert all(e["detail"]["rerun"] for e in events)
    assert hybrid.analyses.get(aid).status == "completed"
    assert _results(hybrid, aid) == reference


def test_hybrid_rolls_back_only_to_the_last_pause(hybrid: amber.Stack) -> None:
    """Run, pause (memory into PostgreSQL), resume, crash, lose Redis, resume: the agents
    go back to the pause's checkpoint, not to nothing, and the calls made before the
    pause are not made again."""
    reference = _reference(hybrid)
    market = MarketDataClient(quotas={"koyfin": 15})
    co = hybrid.coordinator.using(market)
    pm = PauseManager(hybrid.analyses, co)
    aid = co.start_analysis("AAPL", ANALYSTS)
    co.run(aid)
    assert hybrid.analyses.get(aid).status == "paused"
    before_pause = dict(market.ledger)
    market.set_quota("koyfin", None)
    pm.resume(aid, run=False)
    _crash_at(hybrid, aid, market, after=2)
    lose_redis(hybrid, aid)
    report = _resume(hybrid, aid, market)
    rolled = [r for r in report.recovery.values() if r.path == "rolled_back"]
    assert rolled and all(r.rolled_back_to and r.rolled_back_to > 0 for r in rolled)
    for key in before_pause:
        assert market.ledger[key] == 1, key  # made before the pause: never again
    assert hybrid.analyses.get(aid).status == "completed"
    assert _results(hybrid, aid) == reference


def test_hybrid_pauses_instead_when_told_to(engines: Engines) -> None:
    with _stack(engines, durability="hybrid", on_memory_lost="pause") as s:
        market = MarketDataClient()
        aid = s.coordinator.start_analysis("AAPL", ANALYSTS)
        _crash_at(s, aid, market, after=7)
        lose_redis(s, aid)
        with pytest.raises(MemoryRollbackRefused) as info:
            _resume(s, aid, market)
        assert "cannot be rebuilt" in str(info.value) and "on_memory_lost" in str(info.value)
        record = s.analyses.get(aid)
        assert record.status == "running"  # taken over, not started: nothing was run
        assert not any(e["kind"] == "rolled_back" for e in s.analyses.timeline(aid))
    with _stack(engines, durability="hybrid") as s:  # the default setting: rolls back
        report = _resume(s, aid, market)
        assert any(r.path == "rolled_back" for r in report.recovery.values())
        assert s.analyses.get(aid).status == "completed"
