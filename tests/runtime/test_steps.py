"""Durable steps of function agents: recorded once, never called again, retried by policy,
at-most-once steps held in doubt after a crash."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import pytest

import amber
from amber.runtime.app import RESULT_KEY
from tests.runtime.conftest import Crash

AppMaker = Callable[[], amber.App]
Namer = Callable[[str], str]


def test_a_function_agent_runs_its_steps_and_keeps_its_result(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, calls = new_app(), Counter[str]()

    def fetch(url: str) -> dict[str, str]:
        calls["fetch"] += 1
        return {"text": f"one two three {url}"}

    @app.agent(name=name("summarise"), steps=["fetch", "count"])
    def summarise(ctx: Any) -> dict[str, int]:
        doc = ctx.step("fetch", fetch, ctx.input["url"])
        words = ctx.step("count", lambda text: len(text.split()), doc["text"])
        return {"words": words}

    aid = app.submit(stack, [summarise], {"url": "u"})
    results = app.run(stack, aid)
    (result,) = results.values()
    assert result.status == "completed" and result.deliverables[RESULT_KEY] == {"words": 4}
    assert stack.analyses.get(aid).status == "completed"
    (kept,) = stack.analyses.results(aid)
    assert kept["result"] == {"words": 4} and kept["steps"][:2] == ["fetch", "count"]
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert kinds == ["submitted", "claimed", "completed"]
    assert calls["fetch"] == 1


def test_a_resumed_agent_gets_recorded_results_and_never_calls_again(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, calls, crash = new_app(), Counter[str](), {"on": True}

    def expensive(n: int) -> list[int]:
        calls["expensive"] += 1
        return [n, n * 2]

    def flaky(values: list[int]) -> int:
        calls["flaky"] += 1
        if crash["on"]:
            raise Crash  # the process dies here: step 1 is recorded, step 2 is not
        return sum(values)

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> int:
        values = ctx.step("expensive", expensive, 21)
        assert values == [21, 42]  # a list whether fresh or recorded: JSON gives it back
        return int(ctx.step("flaky", flaky, values))

    aid = app.submit(stack, [agent])
    with pytest.raises(Crash):
        app.run(stack, aid)
    assert stack.analyses.get(aid).status == "running" and not stack.analyses.has_runner(aid)
    crash["on"] = False
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed" and result.deliverables[RESULT_KEY] == 63
    assert calls == Counter(expensive=1, flaky=2)


class Stage(StrEnum):
    """Step keys a program keeps as a string enum."""

    FETCH = "fetch"
    COUNT = "count"


def test_a_string_enum_step_key_is_stored_as_its_string_from_the_first_step(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, calls = new_app(), Counter[str]()

    def fetch() -> str:
        calls["fetch"] += 1
        return "one two"

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> int:
        text = ctx.step(Stage.FETCH, fetch)
        return int(ctx.step(Stage.COUNT, lambda t: len(t.split()), text))

    aid = app.submit(stack, [agent])
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed" and result.deliverables[RESULT_KEY] == 2
    (kept,) = stack.analyses.results(aid)
    assert kept["steps"][:2] == ["fetch", "count"]
    assert [type(k) for k in kept["steps"][:2]] == [str, str]
    assert calls["fetch"] == 1


def test_a_key_recorded_by_one_function_is_refused_to_another(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, which = new_app(), {"fn": "first"}

    def first() -> int:
        return 1

    def second() -> int:
        return 2

    def boom() -> None:
        raise Crash

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> int:
        value = ctx.step("value", first if which["fn"] == "first" else second)
        ctx.step("then", boom)
        return int(value)

    aid = app.submit(stack, [agent])
    with pytest.raises(Crash):
        app.run(stack, aid)
    which["fn"] = "second"
    (result,) = app.run(stack, aid).values()
    assert result.status == "failed" and "StepMismatch" not in (result.error or "")
    assert "was recorded by" in (result.error or "") and "second" in (result.error or "")
    assert stack.analyses.get(aid).status == "failed"


def test_a_retry_policy_tries_again_and_a_failed_analysis_continues_on_retry(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, calls, broken = new_app(), Counter[str](), {"until": 2}

    def once() -> str:
        calls["once"] += 1
        return "done"

    def flaky() -> str:
        calls["flaky"] += 1
        if calls["flaky"] <= broken["until"]:
            raise ConnectionError("provider hiccup")
        return "ok"

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> list[str]:
        a = ctx.step("once", once)
        b = ctx.step("flaky", flaky, retry=amber.Retry(attempts=3, backoff=0.01))
        return [a, b]

    aid = app.submit(stack, [agent])
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed" and calls == Counter(once=1, flaky=3)

    broken["until"] = 10  # now it fails every attempt: the agent fails, nothing is lost
    calls.clear()
    aid = app.submit(stack, [agent])
    (result,) = app.run(stack, aid).values()
    assert result.status == "failed" and "failed on all 3 attempts" in (result.error or "")
    assert stack.analyses.get(aid).status == "failed"
    with pytest.raises(amber.AnalysisStateError):
        app.run(stack, aid)
    broken["until"] = 0
    stack.analyses.retry(aid, "test")
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed"
    assert calls["once"] == 1  # recorded before the failure: not called again
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert kinds == ["submitted", "claimed", "failed", "retried", "claimed", "completed"]


def test_an_at_most_once_step_left_unrecorded_is_held_until_a_person_decides(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, sent = new_app(), []

    def send_payment(amount: int) -> str:
        sent.append(amount)
        raise Crash  # the payment went out; the process died before recording it

    @app.agent(name=name("payer"))
    def payer(ctx: Any) -> str:
        return str(ctx.step("pay", send_payment, 100, at_most_once=True))

    aid = app.submit(stack, [payer])
    with pytest.raises(Crash):
        app.run(stack, aid)
    (result,) = app.run(stack, aid).values()  # never re-run blindly
    assert result.status == "step_in_doubt" and sent == [100]
    assert stack.analyses.get(aid).status == "paused"
    (doubt,) = stack.intents.in_doubt(aid)
    assert doubt.step_key == "pay" and doubt.fn.endswith("send_payment")
    stack.intents.resolve(doubt.step_id, rerun=False, result="receipt-7", by="ops")
    with pytest.raises(amber.AnalysisStateError):  # decided once
        stack.intents.resolve(doubt.step_id, rerun=True, by="ops")
    report = app.resume(stack, aid, "ops")
    assert report.results[doubt.agent_type].status == "completed"
    assert sent == [100] and stack.intents.in_doubt(aid) == []
    (kept,) = stack.analyses.results(aid)
    assert kept["result"] == "receipt-7"


def test_an_at_most_once_step_that_takes_the_idempotency_key_is_rerun_with_it(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, keys, crash = new_app(), [], {"on": True}

    def charge(amount: int, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if crash["on"]:
            raise Crash
        return f"charged {amount}"

    @app.agent(name=name("charger"))
    def charger(ctx: Any) -> str:
        return str(ctx.step("charge", charge, 5, at_most_once=True))

    aid = app.submit(stack, [charger])
    with pytest.raises(Crash):
        app.run(stack, aid)
    crash["on"] = False
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed" and result.deliverables[RESULT_KEY] == "charged 5"
    assert len(keys) == 2 and keys[0] == keys[1]  # the same key: the provider deduplicates
    assert stack.intents.in_doubt(aid) == []


def test_app_step_makes_a_plain_function_durable(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, calls = new_app(), Counter[str]()

    @app.step
    def lookup(symbol: str) -> float:
        calls[symbol] += 1
        return 1.5

    assert lookup("outside") == 1.5  # outside a run it is a plain call

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> float:
        return lookup("AAPL") + lookup("AAPL") + lookup("MSFT")

    aid = app.submit(stack, [agent])
    (result,) = app.run(stack, aid).values()
    assert result.deliverables[RESULT_KEY] == 4.5
    assert calls == Counter(outside=1, AAPL=1, MSFT=1)


def test_a_step_result_that_is_not_json_fails_the_agent_and_names_the_step(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app = new_app()

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> None:
        ctx.step("odd", lambda: object())

    aid = app.submit(stack, [agent])
    (result,) = app.run(stack, aid).values()
    assert result.status == "failed" and "step 'odd'" in (result.error or "")
    assert stack.analyses.get(aid).status == "failed"


def test_agents_of_one_analysis_run_at_once(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    import threading

    app = new_app()
    barrier = threading.Barrier(3, timeout=10)  # all three must be inside at the same time

    def meet() -> bool:
        barrier.wait()
        return True

    agents = []
    for i in range(3):

        def agent(ctx: Any) -> bool:
            return bool(ctx.step("meet", meet))

        agents.append(app.agent(name=name(f"a{i}"))(agent))
    aid = app.submit(stack, agents)
    results = app.run(stack, aid)
    assert [r.status for r in results.values()] == ["completed"] * 3


def test_step_bad_input_is_refused(stack: amber.Stack, new_app: AppMaker, name: Namer) -> None:
    for bad in ({"attempts": 0}, {"attempts": 1.5}, {"backoff": -1}, {"max_backoff": float("nan")}):
        with pytest.raises(amber.InvalidValue):
            amber.Retry(**bad)  # type: ignore[arg-type]
    app = new_app()

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> None:
        ctx.step("", len, "x")

    aid = app.submit(stack, [agent])
    (result,) = app.run(stack, aid).values()
    assert result.status == "failed" and "step key" in (result.error or "")
    with pytest.raises(amber.InvalidIdentifier):
        stack.intents.resolve("nope", rerun=True)
    with pytest.raises(amber.NotFound):
        stack.intents.resolve("00000000-0000-0000-0000-000000000000", rerun=True)


def test_results_outlive_the_checkpoints_unless_asked(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app = new_app()

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> int:
        return int(ctx.step("one", lambda: 1))

    aid = app.submit(stack, [agent])
    app.run(stack, aid)
    assert stack.checkpointer.summaries(aid) == []  # purged on completion
    assert [r["result"] for r in stack.analyses.results(aid)] == [1]
    stack.analyses.set_preserve(aid, False)
    stack.retention.purge(aid, results=True)
    assert stack.analyses.results(aid) == []
