"""The views of an analysis (``amber serve``'s and ``amber analyses show``'s) stay whole
while a runner finishes it: whichever of their reads the finish lands after, each agent
shows either its result or its newest checkpoint's steps, never an error."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import amber
from amber.cli.analyses import _listed
from amber.cli.runtime import describe
from amber.web import views

AppMaker = Callable[[], amber.App]
Namer = Callable[[str], str]

READS = [("checkpointer", "summaries"), ("checkpointer", "latest"), ("analyses", "results")]
"""Every read the views make of checkpoints or results (the finish races these)."""

AFTER = range(1, 7)
"""The finish lands after the view's first, second, ... read of those (more than any view
makes: the last cases finish after the view is done)."""


@pytest.fixture
def waiting(stack: amber.Stack, new_app: AppMaker, name: Namer) -> Iterator[tuple[str, str]]:
    """An analysis whose one agent did a step and now waits for a review: (id, agent id)."""
    app = new_app()

    @app.agent(name=name("writer"), steps=["draft", "review:ok", "send"])
    def writer(ctx: Any) -> dict[str, Any]:
        draft = ctx.step("draft", lambda: "text")
        ctx.wait_for_review("ok", draft)
        return {"sent": ctx.step("send", lambda: True)}

    aid = app.submit(stack, [writer], {})
    app.run(stack, aid)
    record = stack.analyses.get(aid)
    assert record.status == "paused"
    yield aid, record.agents[0]["agent_id"]


def _finish_after(
    stack: amber.Stack, monkeypatch: pytest.MonkeyPatch, reads: int, aid: str
) -> None:
    """Make the analysis finish (as a runner does: results written, checkpoints purged,
    in one transaction) right after the view's ``reads``-th read of ``READS``."""
    agent = stack.analyses.get(aid).agents[0]
    seen = [0]

    def finish() -> None:
        stack.analyses.transition(aid, "running", ("paused",))
        row = (agent["agent_id"], agent["agent_type"], "completed", {"sent": True}, ["draft"])
        stack.analyses.finish(aid, "completed", [row], "test", purge=True)

    for owner, method in READS:
        target = getattr(stack, owner)
        real = getattr(target, method)

        def counted(*args: Any, __real: Any = real, **kwargs: Any) -> Any:
            value = __real(*args, **kwargs)
            seen[0] += 1
            if seen[0] == reads:
                finish()
            return value

        monkeypatch.setattr(target, method, functools.wraps(real)(counted))


@pytest.mark.parametrize("reads", AFTER)
def test_the_dashboard_view_is_whole_when_the_analysis_finishes_between_reads(
    stack: amber.Stack,
    waiting: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    reads: int,
) -> None:
    aid, _ = waiting
    _finish_after(stack, monkeypatch, reads, aid)
    shown = views.detail(stack, stack.analyses.get(aid))
    (agent,) = shown["agents"]
    if agent["result"] is not None:
        assert agent["result"] == {"sent": True} and agent["status"] == "completed"
    else:
        assert agent["status"] == "in progress" and agent["steps"] == ["draft"]
    assert views.detail(stack, stack.analyses.get(aid))["agents"][0]["steps"] == ["draft"]
    assert stack.analyses.get(aid).status == "completed"  # the races did happen


@pytest.mark.parametrize("reads", AFTER)
def test_the_list_and_show_views_are_whole_when_the_analysis_finishes_between_reads(
    stack: amber.Stack,
    waiting: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    reads: int,
) -> None:
    aid, _ = waiting
    _finish_after(stack, monkeypatch, reads, aid)
    (agent,) = describe(stack, aid)["agents"]
    assert (agent["status"], agent["progress"]) in [
        ("completed", "completed, 1 of 1"),
        ("in progress", "1 of 1"),  # its result's record is no step
    ]
    assert agent["steps"] == ["draft"]
    (listed,) = _listed(stack, stack.analyses.get(aid))["agents"]
    assert (listed["status"], listed["done"]) in [("completed", 1), ("in progress", 1)]
    (summed,) = views.summary(stack, stack.analyses.get(aid))["agents"]
    assert (summed["status"], summed["done"]) in [("completed", 1), ("in progress", 1)]
    assert stack.analyses.get(aid).status == "completed"  # the races did happen
