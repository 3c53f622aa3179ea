"""One encoder: a value written through a batch is stored as the same bytes as through a
direct call, whatever its type, so it reads, compares and removes the same way."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amber
from amber import ConsistencyError
from amber.memory import read_memory

scalars = st.one_of(
    st.binary(max_size=20),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",)),  # no lone surrogates
        max_size=20,
    ),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
)


def _write(target: Any, kind: str, value: Any) -> None:
    if kind == "string":
        target.set("k", value)
    elif kind == "list":
        target.rpush("k", value, value)
    elif kind == "hash":
        target.hset("k", mapping={value: value})
    elif kind == "set":
        target.sadd("k", value)
    else:
        target.zadd("k", {value: 0.5})


class _Queued:
    """A batch with the direct calls' hset signature (``mapping=``)."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.batch, name)

    def hset(self, name: str, mapping: Any) -> None:
        self.batch.hset(name, mapping)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["string", "list", "hash", "set", "zset"]),
    value=scalars,
)
def test_batch_and_direct_writes_store_identical_bytes(
    stack: amber.Stack, kind: str, value: Any
) -> None:
    direct, batched = (stack.memory(f"enc-{uuid.uuid4().hex[:8]}") for _ in range(2))
    _write(direct, kind, value)
    with batched.batch() as b:
        _write(_Queued(b), kind, value)
    one = read_memory(stack.redis, stack.keys, direct.agent_id).memory["k"]
    two = read_memory(stack.redis, stack.keys, batched.agent_id).memory["k"]
    assert one.type == two.type == kind
    assert one.value == two.value
    direct.delete("k")
    batched.delete("k")


def test_floats_through_a_batch_read_and_remove_like_direct_ones(stack: amber.Stack) -> None:
    mem = stack.memory(f"enc-{uuid.uuid4().hex[:8]}")
    with mem.batch() as b:
        b.rpush("floats", 1.0, 0.1, 1 / 3)
        b.sadd("members", 0.1)
    assert mem.lrange("floats", 0, -1) == [b"1.0", b"0.1", b"0.3333333333333333"]
    assert mem.srem("members", 0.1) == 1


def test_a_garbage_sequence_is_an_amber_error(stack: amber.Stack) -> None:
    mem = stack.memory(f"enc-{uuid.uuid4().hex[:8]}")
    mem.set("a", "1")
    stack.redis.set(stack.keys.l1_seq(mem.agent_id), b"not a number")
    try:
        mem.sequence()
    except ConsistencyError as exc:
        assert "not a number" in str(exc)
    else:
        raise AssertionError("a garbage sequence was read as a number")
    assert mem.get("a") == b"1"  # nothing stored changed
