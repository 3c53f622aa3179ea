"""A step's record is what the step returned when it ran: the caller's changes to the
value it got back are never recorded, so a resumed run gets back what a first run got."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import amber
from amber.runtime.app import RESULT_KEY
from tests.runtime.conftest import Crash

AppMaker = Callable[[], amber.App]
Namer = Callable[[str], str]


def test_a_value_changed_by_its_caller_is_given_back_as_the_step_returned_it(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, crash = new_app(), {"on": True}

    def stop() -> int:
        if crash["on"]:
            raise Crash
        return 0

    @app.agent(name=name("agent"))
    def agent(ctx: Any) -> list[int]:
        values = ctx.step("fetch", lambda: [1])
        values.append(2)  # the caller's own list: not the record
        ctx.step("between", lambda: "checkpointed with the list changed")
        again = ctx.step("fetch", lambda: [1])  # the same key, read back in this run
        ctx.step("stop", stop)
        return values + again

    aid = app.submit(stack, [agent])
    with pytest.raises(Crash):
        app.run(stack, aid)
    crash["on"] = False
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed"
    assert result.deliverables[RESULT_KEY] == [1, 2, 1]
    assert result.deliverables["fetch"] == [1]
