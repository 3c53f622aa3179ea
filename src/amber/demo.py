"""The main job: an AAPL analysis paused twice for days, resumed with zero duplicate work.

1. Three analysts start; the Strategy Analyst's Koyfin quota runs out in
   ``ma_review`` and the analysis pauses (``quota_exhausted``).
2. The long pause, first as L1 expiry: every agent's working memory is gone, the
   snapshot secondary is not. The quota is raised a little and the analysis resumes;
   it runs out again in ``mgmt_compensation`` and pauses.
3. The long pause, then as a Redis restart that loses everything in Redis. The quota
   is lifted and the analysis resumes from PostgreSQL and completes.

Every market-data call is counted; none may repeat, and no finished subtask may run
again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amber import examples
from amber.errors import AmberError
from amber.examples import ANALYSTS, MarketDataClient
from amber.runtime.pause import PauseManager, PauseReport, ResumeReport

if TYPE_CHECKING:
    from amber.stack import Stack

KOYFIN_FIRST = 15
"""Koyfin calls before the first pause: 10 for historical_roi, 5 of ma_review's 10."""
KOYFIN_SECOND = 8
"""Koyfin calls allowed after the first pause: the rest of ma_review, 3 of 10 compensation."""


def expire_l1(stack: Stack, agent_ids: list[str]) -> int:
    """Delete the agents' working memory (keys, index, sequence) as a TTL would."""
    k = stack.keys
    doomed = []
    for agent_id in agent_ids:
        mem = stack.memory(agent_id)
        doomed += [mem.key(n) for n in mem.keys_list()]
        doomed += [k.l1_index(agent_id), k.l1_seq(agent_id), k.l1_epoch(agent_id)]
    return int(stack.redis.delete(*doomed)) if doomed else 0


def _calls_from_scratch(per_run: list[int]) -> int:
    """Calls if every resume had restarted the analysis: run i repeats runs 1..i-1."""
    return sum(sum(per_run[: i + 1]) for i in range(len(per_run)))


def run_demo(
    stack: Stack, lose_redis: Callable[[], str], say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run the scenario and return its report (see the module docstring)."""
    t0 = time.perf_counter()
    market = MarketDataClient(quotas={"koyfin": KOYFIN_FIRST})
    coordinator = examples.app.coordinator(stack, market)
    pauses = PauseManager(stack.analyses, coordinator)
    aid = examples.app.submit(stack, examples.STOCK_ANALYSIS, ticker="AAPL", by="demo")
    agents = [a["agent_id"] for a in stack.analyses.get(aid).agents]
    say(f"analysis {aid}: AAPL with {len(ANALYSTS)} analysts")

    per_run = [market.calls_made]
    coordinator.run(aid)
    per_run[0] = market.calls_made
    timeline: list[dict[str, Any]] = []
    resumes: list[dict[str, Any]] = []
    first = _expect_pause(pauses.current_pause(aid), "first")
    timeline.append({"event": "paused", "reason": first.reason, "calls_so_far": market.calls_made})
    say(f"day 5, 14:47 - paused: {first.reason} ({market.calls_made} calls made)")

    def resume(scenario: str, by: str, koyfin_quota: int | None) -> ResumeReport:
        market.set_quota("koyfin", koyfin_quota)
        report = pauses.resume(aid, by=by)
        per_run.append(market.calls_made - sum(per_run))
        resumes.append({"scenario": scenario, **report.as_dict()})
        say(_summary(report))
        return report

    gone = expire_l1(stack, agents)
    timeline.append({"event": "l1_expired", "keys_deleted": gone})
    say(f"overnight - working memory expired: {gone} keys gone; snapshots remain")
    report = resume("after L1 expiry", "analyst on day 6", KOYFIN_SECOND)
    second = _expect_pause(report.paused_again, "second")
    timeline.append({"event": "paused", "reason": second.reason, "calls_so_far": market.calls_made})

    how = lose_redis()
    timeline.append({"event": "redis_lost", "how": how})
    say(f"weekend - {how}")
    resume("after Redis lost everything", "analyst on day 9", None)

    status = stack.analyses.get(aid).status
    return {
        "analysis_id": aid,
        "status": status,
        "timeline": timeline,
        "resumes": resumes,
        "market_calls": market.calls_made,
        "calls_per_run": per_run,
        "calls_from_scratch": _calls_from_scratch(per_run),
        "duplicate_calls": market.duplicate_calls,
        "subtasks_reexecuted": coordinator.reexecuted,
        "subtasks_run": sum(coordinator.subtask_starts.values()),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _expect_pause(report: PauseReport | None, which: str) -> PauseReport:
    if report is None:
        raise AmberError(f"the {which} quota exhaustion did not pause the analysis")
    return report


def _summary(report: ResumeReport) -> str:
    paths = ", ".join(
        f"{t}: {r.path} ({r.keys} keys, {r.ms:.1f} ms)" for t, r in report.recovery.items()
    )
    tail = f"; paused again: {report.paused_again.reason}" if report.paused_again else "; done"
    return f"resumed - {paths}{tail}"
