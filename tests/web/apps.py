"""The app the web tests serve: an analyst whose market has a quota, an agent that waits
for a review, and one that waits at a gate the test opens."""

from __future__ import annotations

import threading
from typing import Any

import amber
from amber.agents.base import ApiClient
from amber.examples import MarketDataClient, StrategyAnalyst
from amber.memory.working import AgentMemory

KOYFIN_QUOTA = 15
"""Koyfin calls before the analyst pauses: historical_roi's 10 and 5 of ma_review's."""

MARKET = MarketDataClient(quotas={"koyfin": KOYFIN_QUOTA})
"""The market every analyst of this app calls (the test lifts its quota)."""

GATE = threading.Event()
"""The gated agent's first step waits for it."""

app = amber.App("web-tests")


@app.agent
class QuotaAnalyst(StrategyAnalyst):
    """The example Strategy Analyst, on the shared market with a Koyfin quota."""

    agent_type = "web_strategy_analyst"

    def __init__(
        self,
        analysis_id: str,
        stock_ticker: str,
        l1_cache: AgentMemory,
        market: ApiClient | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(analysis_id, stock_ticker, l1_cache, MARKET, config)


@app.agent(name="web_publisher", steps=["draft", "review:publish", "publish"])
def publisher(ctx: Any) -> dict[str, Any]:
    """Drafts, waits for a person's approval, then publishes (or not)."""
    draft = ctx.step("draft", lambda: {"title": f"Note on {ctx.input.get('ticker', 'AAPL')}"})
    decision = ctx.wait_for_review("publish", draft)
    published = ctx.step("publish", lambda: decision.approved)
    return {"draft": draft, "published": published, "by": decision.by}


@app.agent(name="web_gated", steps=["gate", "after"])
def gated(ctx: Any) -> dict[str, Any]:
    """Waits at the gate (a step), then does one more step."""
    ctx.step("gate", lambda: GATE.wait(60))
    return {"after": ctx.step("after", lambda: 1)}


QUOTA = app.analysis("quota_analysis", [QuotaAnalyst])
REVIEWED = app.analysis("reviewed", [publisher])
GATED = app.analysis("gated", [gated])
