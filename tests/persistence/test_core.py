"""The operations as plans, driven by hand with made-up replies: no server."""

from __future__ import annotations

from typing import Any

import pytest

from amber.keys import Keys
from amber.persistence import SessionNotFoundError
from amber.persistence.calls import Done, Get, Plan, Run, advance
from amber.persistence.core import Core

CORE = Core(Keys("amber"), 1000, 1000)
CLUSTER = Core(Keys("amber"), 1000, 1000, cluster=True)


def drive(plan: Plan[Any], replies: list[Any]) -> tuple[list[Any], Any]:
    """The calls ``plan`` makes when given ``replies`` in turn, and its result."""
    calls = []
    step = advance(plan, None)
    for reply in replies:
        assert not isinstance(step, Done)
        calls.append(step)
        step = advance(plan, reply)
    assert isinstance(step, Done), "the plan wanted more replies"
    return calls, step.value


def test_a_read_is_one_get_and_a_missing_document_is_none() -> None:
    calls, got = drive(CORE.get_session("s1"), [None])
    assert calls == [Get("amber:session:{s1}")] and got is None


def _slot(key: str) -> str:
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else key


def _scripts(calls: list[Any]) -> list[str]:
    return [c.script if isinstance(c, Run) else type(c).__name__ for c in calls]


def test_every_script_call_stays_in_one_slot() -> None:
    plans = [
        (CLUSTER.save_session({"session_id": "s1", "goal": "g", "status": "p"}), [3, [1, 1]]),
        (CORE.save_task({"id": "t1", "type": "x"}, "s1"), [[1], 1]),
        (CORE.delete_session("s1"), [5.0, [2, "t1", "t2"], 1, 1, 1]),
    ]
    for plan, replies in plans:
        calls, _ = drive(plan, replies)
        for call in calls:
            if isinstance(call, Run):
                assert len({_slot(k) for k in call.keys}) == 1, call


def test_a_session_is_indexed_before_it_is_written() -> None:
    doc = {"session_id": "s1", "goal": "g", "status": "p"}
    calls, _ = drive(CLUSTER.save_session(doc), [3, [1, 1]])
    assert _scripts(calls) == ["index_session", "save_session"]
    calls, _ = drive(CORE.save_session(doc), [[1, 1]])  # one server: both in one script
    assert _scripts(calls) == ["save_session_indexed"]
    assert calls[0].keys == ["amber:session:{s1}", "amber:session_index"]


def test_a_tasks_lookup_is_written_before_the_task_and_released_if_the_session_is_missing() -> None:
    calls, _ = drive(CORE.save_task({"id": "t1", "type": "x"}, "s1"), [[1], 1])
    assert _scripts(calls) == ["claim_task", "save_task"]
    assert calls[0].keys == ["amber:task_session:t1"]
    with pytest.raises(SessionNotFoundError):
        drive(CORE.save_task({"id": "t1", "type": "x"}, "s1"), [[1], -1, 1])


def test_a_task_id_of_a_session_that_lost_it_is_taken_over() -> None:
    calls, stored = drive(
        CORE.save_task({"id": "t1", "type": "x"}, "s1"), [[0, b"s0"], None, [1], 1]
    )
    assert _scripts(calls) == ["claim_task", "get_task", "claim_task", "save_task"]
    assert calls[1].keys == ["amber:tasks:{s0}", "amber:task_expiry:{s0}"]
    assert calls[2].args[2] == "s0"  # replaces the lookup only if it still names s0
    assert stored.session_id == "s1"


def test_a_session_is_unindexed_after_its_documents_and_lookups_are_gone() -> None:
    calls, deleted = drive(CORE.delete_session("s1"), [5.0, [2, b"t1", b"t2"], 1, 1, 1])
    assert _scripts(calls) == [
        "Score",
        "delete_session",
        "release_task",
        "release_task",
        "unindex_session",
    ]
    assert calls[-1].args == ["s1", 5]  # removed only if no save has changed its score since
    assert deleted == 2
    with pytest.raises(SessionNotFoundError):
        drive(CORE.delete_session("s1"), [None, [-1]])
