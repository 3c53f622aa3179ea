"""Human in the loop: a step that waits for a review pauses the analysis durably; one
decision resumes it and reaches the step exactly once."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import amber
from amber.runtime.app import RESULT_KEY

AppMaker = Callable[[], amber.App]
Namer = Callable[[str], str]


def _reviewed_app(
    new_app: AppMaker, name: Namer, **wait: Any
) -> tuple[amber.App, Any, Counter[str]]:
    app, calls = new_app(), Counter[str]()

    def draft(topic: str) -> str:
        calls["draft"] += 1
        return f"memo on {topic}"

    def publish(memo: str) -> str:
        calls["publish"] += 1
        return f"published: {memo}"

    @app.agent(name=name("writer"))
    def writer(ctx: Any) -> dict[str, Any]:
        memo = ctx.step("draft", draft, ctx.input["topic"])
        decision = ctx.wait_for_review("memo", {"memo": memo}, **wait)
        if not decision.approved:
            return {"outcome": decision.outcome, "by": decision.by}
        return {"outcome": ctx.step("publish", publish, memo), "by": decision.by}

    return app, writer, calls


def test_a_review_pauses_the_analysis_and_its_decision_resumes_it_once(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, writer, calls = _reviewed_app(new_app, name)
    aid = app.submit(stack, [writer], {"topic": "AAPL"})
    (result,) = app.run(stack, aid).values()
    assert result.status == "awaiting_review"
    assert stack.analyses.get(aid).status == "paused"
    pause = stack.analyses.open_pause(aid)
    assert pause is not None and pause["reason"] == "awaiting_review"
    assert pause["frozen_at"] is not None
    (review,) = stack.reviews.list("pending", aid)
    assert review.kind == "memo" and review.payload == {"memo": "memo on AAPL"}
    with pytest.raises(amber.AnalysisStateError):  # paused: nothing runs it yet
        app.run(stack, aid)

    decided = stack.reviews.approve(review.review_id, "alice", "looks right")
    assert decided.status == "approved" and stack.analyses.get(aid).status == "running"
    with pytest.raises(amber.ReviewAlreadyDecided):
        stack.reviews.reject(review.review_id, "bob")
    assert stack.reviews.get(review.review_id).status == "approved"  # the first stands

    (result,) = app.run(stack, aid).values()
    assert result.status == "completed"
    assert result.deliverables[RESULT_KEY] == {"outcome": "published: memo on AAPL", "by": "alice"}
    assert calls == Counter(draft=1, publish=1)
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert kinds == [
        "submitted",
        "claimed",
        "paused",
        "review_decided",
        "resumed",
        "claimed",
        "completed",
    ]


def test_a_rejection_reaches_the_step(stack: amber.Stack, new_app: AppMaker, name: Namer) -> None:
    app, writer, calls = _reviewed_app(new_app, name)
    aid = app.submit(stack, [writer], {"topic": "MSFT"})
    app.run(stack, aid)
    (review,) = stack.reviews.list("pending", aid)
    stack.reviews.reject(review.review_id, "carol", data={"why": "numbers"})
    (result,) = app.run(stack, aid).values()
    assert result.deliverables[RESULT_KEY] == {"outcome": "rejected", "by": "carol"}
    assert calls == Counter(draft=1)


def test_a_passed_deadline_applies_the_declared_outcome(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, writer, calls = _reviewed_app(
        new_app, name, deadline=timedelta(seconds=0.5), on_deadline="approve"
    )
    aid = app.submit(stack, [writer], {"topic": "NVDA"})
    (result,) = app.run(stack, aid).values()
    assert result.status == "awaiting_review"
    (review,) = stack.reviews.list("pending", aid)
    assert review.deadline is not None and review.deadline > datetime.now(UTC) - timedelta(1)
    import time

    time.sleep(0.6)
    (expired,) = [r for r in stack.reviews.expire_due() if r.analysis_id == aid]
    assert expired.status == "expired" and expired.decision is not None
    assert expired.decision["outcome"] == "approved" and expired.decision["expired"]
    assert stack.analyses.get(aid).status == "running"
    (result,) = app.run(stack, aid).values()
    assert result.deliverables[RESULT_KEY]["by"] == "deadline"
    assert calls == Counter(draft=1, publish=1)


def test_review_bad_input_is_refused_and_changes_nothing(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    with pytest.raises(amber.ReviewNotFound):
        stack.reviews.approve(uuid.uuid4(), "alice")
    with pytest.raises(amber.ReviewNotFound):  # a task's review may have any safe id
        stack.reviews.approve("not-a-uuid", "alice")
    with pytest.raises(amber.InvalidIdentifier):
        stack.reviews.approve("scope:id:more", "alice")
    app, writer, _ = _reviewed_app(new_app, name)
    aid = app.submit(stack, [writer], {"topic": "AMZN"})
    app.run(stack, aid)
    (review,) = stack.reviews.list("pending", aid)
    with pytest.raises(amber.InvalidValue):
        stack.reviews.decide(review.review_id, "maybe", "alice")
    with pytest.raises(amber.InvalidValue):
        stack.reviews.approve(review.review_id, "alice", comment="\x00")
    with pytest.raises(amber.InvalidValue):
        stack.reviews.list("undecided")
    assert stack.reviews.get(review.review_id).status == "pending"
    assert stack.analyses.get(aid).status == "paused"

    bad = new_app()

    @bad.agent(name=name("bad"))
    def wrong(ctx: Any) -> None:
        ctx.wait_for_review("memo", on_deadline="shrug")

    aid = bad.submit(stack, [wrong])
    (result,) = bad.run(stack, aid).values()
    assert result.status == "failed" and "on_deadline" in (result.error or "")


def test_a_decision_that_races_the_pause_is_never_lost(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    """Decided between the step's wait and the run's pause: the run goes on, no pause."""
    app, calls = new_app(), Counter[str]()
    holder: dict[str, Any] = {}

    def decide_now() -> None:
        (review,) = stack.reviews.list("pending", holder["aid"])
        stack.reviews.approve(review.review_id, "fast")

    @app.agent(name=name("racer"))
    def racer(ctx: Any) -> str:
        try:
            decision = ctx.wait_for_review("quick")
        except amber.AwaitingReview:
            decide_now()  # decided before the run pauses the analysis
            raise
        calls["after"] += 1
        return decision.outcome

    holder["aid"] = aid = app.submit(stack, [racer])
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed" and result.deliverables[RESULT_KEY] == "approved"
    assert stack.analyses.get(aid).status == "completed" and calls["after"] == 1
