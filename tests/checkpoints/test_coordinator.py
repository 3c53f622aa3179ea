"""The coordinator: completed subtasks never run again; retries and quotas are recorded."""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import pytest

import amber
from amber import AnalysisStateError
from amber.agents import BaseAgent
from amber.examples import ANALYSTS, MarketDataClient
from amber.pause import PauseManager

RUNS: Counter[str] = Counter()


class Flaky(BaseAgent):
    """Fails in subtask 'three' while ``broken`` is set."""

    agent_type = "flaky_agent"
    subtasks = ("one", "two", "three", "four")
    broken: ClassVar[bool] = True

    def run_subtask(self, name: str) -> Any:
        RUNS[name] += 1
        self.l1_cache.set(f"note:{name}", name)
        if name == "three" and Flaky.broken:
            raise RuntimeError("upstream parser crashed")
        return {"ok": name}


def test_failure_in_subtask_3_then_restore_runs_1_and_2_zero_more_times(
    stack: amber.Stack,
) -> None:
    RUNS.clear()
    Flaky.broken = True
    co = stack.coordinator.using()
    aid = co.start_analysis("AAPL", [Flaky])
    result = co.run(aid)["flaky_agent"]
    retries = stack.settings.max_retries
    assert result.status == "failed" and result.progress == "2 of 4 subtasks"
    assert Counter({"one": 1, "two": 1, "three": 1 + retries}) == RUNS
    cp = stack.checkpointer.restore_checkpoint(aid, "flaky_agent").checkpoint
    assert cp.failure_reason == "RuntimeError: upstream parser crashed"
    assert cp.retry_count == 1 + retries and cp.error_details["subtask"] == "three"  # type: ignore[index]
    assert stack.analyses.get(aid).status == "failed"

    # fixed; the analysis is retried by a fresh coordinator (a new process, say)
    Flaky.broken = False
    stack.analyses.transition(aid, "running", ("failed",))
    fresh = stack.coordinator.using()
    result = fresh.run(aid)["flaky_agent"]
    assert result.status == "completed"
    assert RUNS["one"] == 1 and RUNS["two"] == 1  # zero more times
    assert RUNS["three"] == 2 + retries and RUNS["four"] == 1
    assert fresh.reexecuted == 0
    assert stack.analyses.get(aid).status == "completed"
    assert stack.checkpointer.summaries(aid) == []  # purged on success


def test_quota_error_always_pauses_with_its_reason(stack: amber.Stack) -> None:
    # no pause manager was touched: the runner itself pauses on a quota
    market = MarketDataClient(quotas={"koyfin": 13})  # 10 for historical_roi, 3 for ma_review
    co = stack.coordinator.using(market)
    aid = co.start_analysis("AAPL", ANALYSTS)
    results = co.run(aid)  # the agents run at once: the others stop at their next subtask
    assert results["financial_analyst"].status in ("completed", "stopped")
    strategy = results["strategy_analyst"]
    assert strategy.status == "quota_exhausted" and strategy.progress == "1 of 4 subtasks"
    assert results["valuation_agent"].status in ("completed", "stopped")
    assert stack.analyses.get(aid).status == "paused"
    pause = stack.analyses.open_pause(aid)
    assert pause is not None and pause["reason"] == "quota_exhausted"
    assert pause["paused_by"] == "strategy_analyst" and pause["frozen_at"] is not None
    cp = stack.checkpointer.restore_checkpoint(aid, "strategy_analyst").checkpoint
    assert cp.failure_reason == "quota_exhausted"
    details = cp.error_details or {}
    assert details["subtask"] == "ma_review" and details["type"] == "QuotaExceeded"
    assert details["provider"] == "koyfin" and "quota of 13 calls" in details["message"]
    # quota lifted: continue; the 3 acquisition years already fetched are not fetched again
    market.set_quota("koyfin", None)
    results = PauseManager(stack.analyses, co).resume(aid).results
    assert all(r.status == "completed" for r in results.values())
    assert market.duplicate_calls == 0 and co.reexecuted == 0


def test_analysts_produce_their_deliverables(stack: amber.Stack) -> None:
    co = stack.coordinator.using(MarketDataClient())
    aid = co.start_analysis("AAPL", ANALYSTS)
    results = co.run(aid)
    assert [r.progress for r in results.values()] == [
        "4 of 4 subtasks",
        "4 of 4 subtasks",
        "5 of 5 subtasks",
    ]
    val = results["valuation_agent"].deliverables
    assert 0.05 < val["wacc_calculation"]["wacc"] < 0.15
    assert len(val["sensitivity_analysis"]["scenarios"]) == 9
    assert (
        0
        <= results["strategy_analyst"].deliverables["capital_allocation_scoring"]["final_score"]
        <= 1
    )
    assert co.market.calls_made == 50 and co.market.duplicate_calls == 0


def test_running_a_finished_analysis_is_refused(stack: amber.Stack) -> None:
    co = stack.coordinator.using()
    aid = co.start_analysis("AAPL", [Flaky])
    Flaky.broken = False
    co.run(aid)
    with pytest.raises(AnalysisStateError, match="completed"):
        co.run(aid)
    with pytest.raises(amber.AnalysisNotFound):
        co.run("00000000-0000-0000-0000-000000000000")


def test_start_analysis_records_what_submit_records(stack: amber.Stack) -> None:
    """``stack.coordinator`` is a door onto the one engine: its analyses carry their
    input and submitter like ``App.submit``'s."""
    aid = stack.coordinator.start_analysis("AAPL", ANALYSTS, input={"horizon": 5}, by="desk")
    record = stack.analyses.get(aid)
    assert record.input == {"horizon": 5}
    (submitted,) = [e for e in stack.analyses.timeline(aid) if e["kind"] == "submitted"]
    assert submitted["by"] == "desk"
