"""A save encodes only the entries a step added to the record's growing fields, and what
it stores is byte for byte what encoding the whole record gives, whatever the agent did
to its lists and dicts in between."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amber
from amber.agents import BaseAgent
from amber.checkpoints.growing import GrowingDict, GrowingFields, GrowingList
from amber.checkpoints.model import Checkpoint
from amber.runtime.app import FunctionAgent


class Stepper(BaseAgent):
    """A class agent whose steps the test completes by hand."""

    agent_type = "growing_stepper"
    dynamic = True

    def run_subtask(self, name: str) -> Any:  # pragma: no cover - never run
        raise NotImplementedError


class Function(FunctionAgent):
    """A function agent, whose results amber alone holds."""

    agent_type = "growing_function"


@pytest.fixture(scope="module")
def memory() -> Iterator[Any]:
    with amber.connect() as stack:
        yield stack.memory(f"growing-{uuid.uuid4().hex[:8]}")


def _record(agent: BaseAgent) -> Checkpoint:
    """The parts of a save's record that grow, copied as a save copies them."""
    return Checkpoint(
        str(uuid.uuid4()), agent.analysis_id, "T", agent.agent_type, agent.agent_id,
        datetime.now(UTC), "1", completed_subtasks=list(agent.completed_subtasks),
        interim_results=agent.get_interim_results(), step_functions=dict(agent.step_functions),
    )  # fmt: skip


def _save(agent: BaseAgent) -> dict[str, bytes]:
    """What a save encodes, checked against encoding it whole, then kept as a save does."""
    cp = _record(agent)
    fields = cp.fields(agent.encoded.known(agent))
    assert fields == cp.fields()
    agent.encoded.learn(agent, fields)
    return fields


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
keys = st.sampled_from(["a", "b", "c", "d", "é", 'q"', "s1", "s2"])
actions = st.one_of(
    st.tuples(st.just("complete"), keys, values, st.booleans()),
    st.tuples(st.just("uncomplete"), keys, values, st.booleans()),
    st.tuples(st.just("set_result"), keys, values, st.booleans()),
    st.tuples(st.just("set_function"), keys, values, st.booleans()),
    st.tuples(st.just("drop_step"), keys, values, st.booleans()),
    st.tuples(st.just("swap_step"), keys, values, st.booleans()),
    st.tuples(st.just("own_list"), keys, values, st.booleans()),
    st.tuples(st.just("restore"), keys, values, st.booleans()),
    st.tuples(st.just("save"), keys, values, st.booleans()),
)


def _act(agent: BaseAgent, action: tuple[str, str, Any, bool]) -> None:
    what, key, value, flag = action
    if what == "complete":
        raw = orjson.dumps(value) if flag else None
        agent.complete(key, value, "tests:fn" if flag else None, raw)
    elif what == "uncomplete" and key in agent.completed_subtasks:
        agent.uncomplete(key, flag)
    elif what == "set_result":
        agent.interim_results[key] = value
    elif what == "set_function":
        agent.step_functions[key] = str(value)
    elif what == "drop_step" and agent.completed_subtasks:
        agent.completed_subtasks.pop(0 if flag else -1)
    elif what == "swap_step" and agent.completed_subtasks:
        agent.completed_subtasks[-1] = key  # the same length, another entry
    elif what == "own_list":
        agent.completed_subtasks = list(agent.completed_subtasks)
    elif what == "restore":
        agent.apply_checkpoint(_record(agent))
    if what == "save" or (what == "complete" and flag):
        _save(agent)


@settings(max_examples=150, deadline=None)
@given(st.booleans(), st.lists(actions, max_size=25))
def test_what_a_save_encodes_is_the_whole_record_s_bytes(
    memory: Any, function: bool, script: list[tuple[str, str, Any, bool]]
) -> None:
    agent = (Function if function else Stepper)(str(uuid.uuid4()), "T", memory)
    for action in [*script, ("save", "a", None, False)]:
        _act(agent, action)
        steps = agent.completed_subtasks
        assert all(agent.has_completed(k) == (k in steps) for k in ["a", "b", "s1", "zz"])


def test_a_step_adds_its_entries_to_the_bytes_kept(memory: Any) -> None:
    agent = Function(str(uuid.uuid4()), "T", memory)
    _save(agent)
    for i in range(3):
        agent.complete(f"s{i}", {"i": i}, "m:f")
        known = agent.encoded.known(agent)
        assert set(known) == {"completed_subtasks", "interim_results", "step_functions"}
        _save(agent)
    assert known["interim_results"] == b'{"s0":{"i":0},"s1":{"i":1},"s2":{"i":2}}'


def test_a_key_completed_again_is_encoded_whole_not_added_twice(memory: Any) -> None:
    agent = Function(str(uuid.uuid4()), "T", memory)
    _save(agent)
    agent.complete("a", 1, "m:f")
    _save(agent)
    agent.complete("a", 2, "m:g")  # set again where it stands: no entry added
    assert set(agent.encoded.known(agent)) == {"completed_subtasks"}
    fields = _save(agent)
    assert fields["interim_results"] == b'{"a":2}' and fields["step_functions"] == b'{"a":"m:g"}'


def test_a_class_agent_s_results_are_encoded_whole_at_every_save(memory: Any) -> None:
    agent = Stepper(str(uuid.uuid4()), "T", memory)
    agent.complete("s0", {"n": [0]}, "m:f")
    _save(agent)
    agent.interim_results["s0"]["n"].append(1)  # its subtasks may change what they read
    agent.complete("s1", 1, "m:f")
    assert "interim_results" not in agent.encoded.known(agent)
    assert orjson.loads(_save(agent)["interim_results"]) == {"s0": {"n": [0, 1]}, "s1": 1}


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.append("x"),
        lambda c: c.extend(["x"]),
        lambda c: c.insert(0, "x"),
        lambda c: c.remove("a"),
        lambda c: c.pop(),
        lambda c: c.clear(),
        lambda c: c.sort(),
        lambda c: c.reverse(),
        lambda c: c.__setitem__(0, "x"),
        lambda c: c.__delitem__(0),
        lambda c: c.__iadd__(["x"]),
        lambda c: c.__imul__(2),
    ],
)
def test_every_change_to_a_growing_list_is_counted(change: Callable[[Any], Any]) -> None:
    items = GrowingList(["a", "b"])
    change(items)
    assert items.changes == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.__setitem__("a", 2),
        lambda c: c.__delitem__("a"),
        lambda c: c.pop("a"),
        lambda c: c.popitem(),
        lambda c: c.clear(),
        lambda c: c.update(b=2),
        lambda c: c.setdefault("b", 2),
        lambda c: c.__ior__({"b": 2}),
    ],
)
def test_every_change_to_a_growing_dict_is_counted(change: Callable[[Any], Any]) -> None:
    items = GrowingDict({"a": 1})
    change(items)
    assert items.changes == 1


def test_bytes_are_kept_only_for_containers_that_count_their_changes() -> None:
    class Owner:
        completed_subtasks: list[str] = ["a"]

    fields = GrowingFields(("completed_subtasks",))
    fields.learn(Owner(), {"completed_subtasks": b'["a"]'})
    assert fields.known(Owner()) == {}
