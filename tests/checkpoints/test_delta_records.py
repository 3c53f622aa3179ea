"""Delta records: a row that stores only what changed since its agent's base row reads
back as the whole record, whatever the agent did to its state, and a damaged or missing
base is found, never folded into a wrong state."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amber
from amber import CheckpointCorrupt, codec
from amber.agents import BaseAgent
from amber.checkpoints import delta
from amber.checkpoints.delta import Base


class Stepper(BaseAgent):
    """A dynamic agent whose steps the test completes by hand, one checkpoint each."""

    agent_type = "delta_stepper"
    version = "1.0"
    dynamic = True

    def run_subtask(self, name: str) -> Any:  # pragma: no cover - never run
        raise NotImplementedError


@pytest.fixture
def agent(stack: amber.Stack, uid: Callable[[str], str]) -> Stepper:
    # a config worth not writing again: a delta pays when it is under half the record
    config = {"prompt": "q" * 2000}
    return Stepper(str(uuid.uuid4()), "AAPL", stack.memory(uid("delta")), config=config)


def _step(stack: amber.Stack, a: Stepper, key: str, value: Any) -> amber.Checkpoint:
    a.complete(key, value)
    a.step_functions[key] = "tests:step"
    return stack.checkpointer.save_checkpoint(a, key)


def _rows(stack: amber.Stack, a: Stepper) -> list[tuple[int, int | None, list[str]]]:
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT seq, state_base, completed_subtasks FROM agent_checkpoints"
            " WHERE analysis_id = %s ORDER BY seq",
            (a.analysis_id,),
        ).fetchall()
    return [(int(r[0]), r[1], list(r[2])) for r in rows]


def _restored(stack: amber.Stack, a: Stepper, backup: bool = False) -> amber.Checkpoint:
    if not backup:
        stack.redis.delete(stack.keys.checkpoint(a.agent_id))
    got = stack.checkpointer.restore_checkpoint(a.analysis_id, a.agent_type, agent_id=a.agent_id)
    assert got.source == ("redis_backup" if backup else "postgresql")
    return got.checkpoint


def _spoil(stack: amber.Stack, a: Stepper, seq: int) -> None:
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE agent_checkpoints SET state = %s WHERE analysis_id = %s AND seq = %s",
            (codec.pack(b'{"tampered": true}'), a.analysis_id, seq),
        )


def test_a_long_run_stores_deltas_that_read_back_whole(stack: amber.Stack, agent: Stepper) -> None:
    saved = [_step(stack, agent, f"s{i}", {"i": i, "text": "x" * 20}) for i in range(120)]
    rows = _rows(stack, agent)
    bases = [seq for seq, base, _ in rows if base is None]
    assert bases[0] == 1 and 2 <= len(bases) < 20  # mostly deltas, re-based as they grow
    for seq, base, steps in rows:  # a delta row's steps are those after its base's
        first = 0 if base is None else base
        assert steps == [f"s{i}" for i in range(first, seq)]
    assert _restored(stack, agent, backup=True) == saved[-1]
    assert _restored(stack, agent) == saved[-1]
    for cp in (saved[1], saved[bases[1] - 2], saved[-2]):
        assert stack.checkpointer.get(cp.checkpoint_id) == cp
    latest = stack.checkpointer.latest(agent.analysis_id)[agent.agent_type]
    assert latest["done"] == 120 and latest["steps"] == [f"s{i}" for i in range(120)]
    assert [s["done"] for s in stack.checkpointer.summaries(agent.analysis_id, 3)] == [
        120,
        119,
        118,
    ]


def test_a_result_changed_in_place_is_stored_changed(stack: amber.Stack, agent: Stepper) -> None:
    for i in range(8):
        _step(stack, agent, f"s{i}", {"n": [i], "pad": "p" * 60})
    agent.interim_results["s1"]["n"].append(99)  # the agent's own object, changed in place
    agent.interim_results.pop("s3")
    agent.config["late"] = True
    last = _step(stack, agent, "s8", "eight")
    assert _rows(stack, agent)[-1][1] is not None  # still a delta: a field restated whole
    got = _restored(stack, agent)
    assert got == last
    assert got.interim_results["s1"]["n"] == [1, 99] and "s3" not in got.interim_results
    assert got.agent_config["late"] is True


def test_steps_taken_back_make_the_row_whole(stack: amber.Stack, agent: Stepper) -> None:
    for i in range(4):
        _step(stack, agent, f"s{i}", "p" * 60)
    assert _rows(stack, agent)[-1][1] == 1
    agent.completed_subtasks.remove("s2")  # after the base: still entries added to it
    _step(stack, agent, "s4", 4)
    assert _rows(stack, agent)[-1] == (5, 1, ["s1", "s3", "s4"])
    agent.completed_subtasks.remove("s0")  # the base's own: restated, so whole
    last = _step(stack, agent, "s5", 5)
    assert _rows(stack, agent)[-1] == (6, None, ["s1", "s3", "s4", "s5"])
    assert _restored(stack, agent) == last


def test_a_corrupt_base_falls_back_below_it_never_to_a_folded_guess(
    stack: amber.Stack, agent: Stepper
) -> None:
    saved = [_step(stack, agent, f"s{i}", {"i": i, "pad": "p" * 40}) for i in range(60)]
    rows = _rows(stack, agent)
    base = max(seq for seq, b, _ in rows if b is None)
    assert base > 1 and rows[-1][1] == base
    _spoil(stack, agent, base)
    got = stack.checkpointer.restore_checkpoint(agent.analysis_id, agent.agent_type)
    assert got.checkpoint == saved[base - 2]  # the newest row below the spoiled base
    assert any(saved[-1].checkpoint_id in s for s in got.skipped)
    with pytest.raises(CheckpointCorrupt):
        stack.checkpointer.get(saved[-1].checkpoint_id)


def test_a_corrupt_delta_falls_back_to_the_one_before(stack: amber.Stack, agent: Stepper) -> None:
    saved = [_step(stack, agent, f"s{i}", "p" * 60) for i in range(6)]
    assert _rows(stack, agent)[-1][1] is not None
    _spoil(stack, agent, 6)
    assert _restored(stack, agent) == saved[-2]


def test_a_backup_whose_base_row_is_spoiled_is_not_trusted(
    stack: amber.Stack, agent: Stepper
) -> None:
    for i in range(4):
        _step(stack, agent, f"s{i}", "p" * 60)
    assert [b for _, b, _ in _rows(stack, agent)] == [None, 1, 1, 1]
    with stack.pg.connection() as conn:  # the base's checksum no longer matches its bytes
        conn.execute(
            "UPDATE agent_checkpoints SET state_sha256 = repeat('0', 64)"
            " WHERE analysis_id = %s AND seq = 1",
            (agent.analysis_id,),
        )
    with pytest.raises(CheckpointCorrupt) as err:  # every row folds on it: none is used
        stack.checkpointer.restore_checkpoint(
            agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
        )
    assert "redis_backup: checkpoint checksum does not match" in str(err.value)


def test_a_delta_whose_base_row_was_deleted_is_written_whole(
    stack: amber.Stack, agent: Stepper
) -> None:
    for i in range(3):
        _step(stack, agent, f"s{i}", "p" * 60)
    assert _rows(stack, agent)[-1][1] == 1
    with stack.pg.connection() as conn:
        conn.execute(
            "DELETE FROM agent_checkpoints WHERE analysis_id = %s AND seq = 1",
            (agent.analysis_id,),
        )
    last = _step(stack, agent, "s3", "p" * 60)
    assert _rows(stack, agent)[-1] == (4, None, ["s0", "s1", "s2", "s3"])
    assert _restored(stack, agent) == last


# -- the encoding, without servers ---------------------------------------------------------
def _base(fields: dict[str, bytes]) -> Base:
    raw = b"{}"
    return Base("a", "t", 1, str(uuid.uuid4()), codec.sha256_hex(raw), fields, 0)


@pytest.mark.parametrize(
    ("old", "new", "appended"),
    [
        (b"[1]", b"[12]", None),
        (b'{"a":1}', b'{"a":12}', None),
        (b'{"a":"x"}', b'{"a":"x,","b":1}', None),
        (b"[]", b"[1,2]", b"[1,2]"),
        (b"{}", b'{"a":1}', b'{"a":1}'),
        (b'["a"]', b'["a","b"]', b'["b"]'),
        (b'{"a":[1]}', b'{"a":[1],"b":{"c":2}}', b'{"b":{"c":2}}'),
        (b'"ab"', b'"abc"', None),
        (b"[1]", b"[1]", None),
    ],
)
def test_only_entries_added_at_the_end_are_appended(
    old: bytes, new: bytes, appended: bytes | None
) -> None:
    assert delta._appended(old, new) == appended


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
docs = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), json_values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(docs, docs)
def test_a_delta_folds_its_base_into_the_record(old: dict[str, Any], new: dict[str, Any]) -> None:
    fields = {k: orjson.dumps(v) for k, v in sorted(old.items())}
    base = _base(fields)
    raw, _ = delta.diff(base, {k: orjson.dumps(v) for k, v in sorted(new.items())})
    folded = delta.fold(orjson.loads(raw), old, base.checkpoint_id, base.sha256)
    assert folded == new


@settings(max_examples=200, deadline=None)
@given(docs, st.lists(st.tuples(st.booleans(), json_values), max_size=6))
def test_entries_added_are_all_a_delta_stores(old: dict[str, Any], added: list[Any]) -> None:
    old = {**old, "a": {"k": 0}, "b": [0]}
    new = {**old, "a": dict(old["a"]), "b": list(old["b"])}
    for n, (to_dict, value) in enumerate(added):
        if to_dict:
            new["a"][f"k{n}"] = value
        else:
            new["b"].append(value)
    base = _base({k: orjson.dumps(v) for k, v in sorted(old.items())})
    raw, restated = delta.diff(base, {k: orjson.dumps(v) for k, v in sorted(new.items())})
    assert not restated & {"a", "b"}
    assert delta.fold(orjson.loads(raw), old, base.checkpoint_id, base.sha256) == new


def test_a_delta_on_another_base_is_refused() -> None:
    base = _base({"a": b"[1]"})
    raw, _ = delta.diff(base, {"a": b"[1,2]"})
    with pytest.raises(CheckpointCorrupt):
        delta.fold(orjson.loads(raw), {"a": [1]}, str(uuid.uuid4()), base.sha256)
    with pytest.raises(CheckpointCorrupt):
        delta.fold(orjson.loads(raw), {"a": {"x": 1}}, base.checkpoint_id, base.sha256)


def test_deltas_damaged_on_their_own_fall_back_to_their_sound_base(
    stack: amber.Stack, agent: Stepper
) -> None:
    saved = [_step(stack, agent, f"s{i}", "p" * 60) for i in range(6)]
    assert [b for _, b, _ in _rows(stack, agent)] == [None, 1, 1, 1, 1, 1]
    for seq in range(2, 7):  # every delta, not the base
        _spoil(stack, agent, seq)
    assert _restored(stack, agent) == saved[0]


def test_a_field_named_like_a_delta_marker_is_a_field(stack: amber.Stack, agent: Stepper) -> None:
    saved = _step(stack, agent, "s0", 0)
    saved.extra.update(delta=1, format="delta-1", base=1)  # read back as extra fields
    cp = amber.Checkpoint.from_doc(orjson.loads(saved.encode()))
    assert not delta.is_delta(orjson.loads(cp.encode()))
    assert cp.extra["delta"] == 1 and "format" not in cp.extra
