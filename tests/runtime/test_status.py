"""One status view: ``amber analyses list`` and ``show`` (their ``--json``), the API and
the dashboard (which renders the API's documents) say the same about an analysis in every
state: each agent's status and progress, whether it is queued or held, and in the same
words."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from typer.testing import CliRunner

import amber
from amber.cli import app as cli
from amber.runtime import status

AppMaker = Callable[[], amber.App]
Namer = Callable[[str], str]

runner = CliRunner()


def _cli(*args: str) -> Any:
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _surfaces(stack: amber.Stack, aid: str) -> dict[str, Any]:
    record = stack.analyses.get(aid)
    listed = next(d for d in _cli("analyses", "list", "--limit", "500") if d["analysis_id"] == aid)
    return {
        "cli list": listed,
        "cli show": _cli("analyses", "show", aid),
        "api summary": json.loads(json.dumps(status.summary(stack, record), default=str)),
        "api detail": json.loads(json.dumps(status.detail(stack, record), default=str)),
    }


def _said(doc: dict[str, Any]) -> tuple[Any, ...]:
    """What a surface says: the analysis's state, then each agent's progress in words."""
    state = doc.get("state", doc["status"])
    agents = tuple(
        (
            a["agent_type"],
            a["status"],
            a["progress"] if "done" not in a else status.progress_text(a),
        )
        for a in doc["agents"]
    )
    return state, agents


def test_every_surface_says_the_same_in_every_state(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app = new_app()

    @app.agent(name=name("writer"), steps=["draft", "review:ok", "send"])
    def writer(ctx: Any) -> dict[str, Any]:
        draft = ctx.step("draft", lambda: "text")
        if ctx.input.get("review"):
            ctx.wait_for_review("ok", draft)
        if ctx.input.get("fail"):
            ctx.step("send", lambda: 1 / 0, retry=amber.Retry(attempts=1))
        return {"sent": ctx.step("send", lambda: True)}

    @app.agent(name=name("idle"), steps=["only"])
    def idle(ctx: Any) -> int:
        return int(ctx.step("only", lambda: 1))

    queued = app.submit(stack, [writer, idle], {})
    paused = app.submit(stack, [writer], {"review": True})
    app.run(stack, paused)
    done = app.submit(stack, [writer, idle], {})
    app.run(stack, done)
    failed = app.submit(stack, [writer], {"fail": True})
    app.run(stack, failed)
    held = app.submit(stack, [writer], {})
    states = {}
    with stack.analyses.runner_lock(held):  # a live run holds it
        for aid in (queued, paused, done, failed, held):
            said = {k: _said(v) for k, v in _surfaces(stack, aid).items()}
            assert len(set(said.values())) == 1, said
            states[aid] = said["cli show"][0]
    assert states == {
        queued: status.QUEUED,
        paused: "paused",
        done: "completed",
        failed: "failed",
        held: "running",
    }
