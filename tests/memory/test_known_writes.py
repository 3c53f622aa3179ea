"""A save builds its snapshot from the values its memory object wrote, without reading
them back, only when those writes provably are the only ones since the last save.

Each test checks the stored snapshot against a whole read of Redis: the shortcut is
never trusted, only proven.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amber
from amber.errors import WrongType
from amber.memory import AgentMemory, read_memory

from .conftest import Writer, exact, save_step


def _agent(stack: amber.Stack, uid: Callable[[str], str]) -> Writer:
    return Writer(str(uuid.uuid4()), "AAPL", stack.memory(uid("known")))


def test_sets_and_deletes_are_saved_without_reading_them_back(
    stack: amber.Stack, uid: Callable[[str], str], reads: list[str]
) -> None:
    agent = _agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch() as b:
        for i in range(50):
            b.set(f"k{i}", i)
    save_step(stack, agent)  # the first save reads the memory whole
    reads.clear()
    with mem.batch() as b:
        b.set("k1", "one").delete("k2").set("new", b"\xff\x00")
    mem.set("k3", 3.5)
    mem.delete("k4", "never-there")
    save_step(stack, agent)
    assert reads == []
    exact(stack, agent.agent_id)
    report = stack.checkpointer.restore_checkpoint(agent.analysis_id, Writer.agent_type)
    assert report.checkpoint.l1_snapshot_hash == stack.snapshotter.stored(agent.agent_id).snap.hash  # type: ignore[union-attr]


def test_a_write_by_another_object_makes_the_save_read_redis(
    stack: amber.Stack, uid: Callable[[str], str], reads: list[str]
) -> None:
    agent = _saved(stack, uid, reads, _a_string)
    mem = agent.l1_cache
    mem.set("a", 2)
    stack.memory(agent.agent_id).set("b", "from elsewhere")  # a sequence in between
    mem.set("c", 3)
    _saved_by_reading(stack, agent, reads)
    assert stack.snapshotter.stored(agent.agent_id).snap.memory["b"].value == b"from elsewhere"  # type: ignore[union-attr]


def test_another_objects_write_after_the_agents_last_is_in_the_next_save(
    stack: amber.Stack, uid: Callable[[str], str], reads: list[str]
) -> None:
    """The snapshot is the memory as the agent's own last write left it (a state Redis
    provably held), as a read is the memory at the instant of the read; a write after
    either lands in the next save, which finds it through the server's change record."""
    agent = _agent(stack, uid)
    mem = agent.l1_cache
    mem.set("a", 1)
    save_step(stack, agent)
    mem.set("a", 2)
    late = stack.memory(agent.agent_id)
    late.set("b", "late")
    save_step(stack, agent)
    stored = stack.snapshotter.stored(agent.agent_id)
    assert stored is not None and "b" not in stored.snap.memory
    assert stored.snap.memory["a"].value == b"2"
    reads.clear()
    mem.set("c", 3)
    _saved_by_reading(stack, agent, reads)


def _saved(
    stack: amber.Stack,
    uid: Callable[[str], str],
    reads: list[str],
    first: Callable[[AgentMemory], object],
) -> Writer:
    """An agent whose memory ``first`` wrote to, saved once (its reads forgotten)."""
    agent = _agent(stack, uid)
    first(agent.l1_cache)
    save_step(stack, agent)
    reads.clear()
    return agent


def _saved_by_reading(stack: amber.Stack, agent: Writer, reads: list[str]) -> None:
    """Save: the save read the changes from Redis, and stored what Redis holds."""
    save_step(stack, agent)
    assert reads == [agent.agent_id]
    exact(stack, agent.agent_id)


def _a_list(mem: AgentMemory) -> object:
    return mem.rpush("log", "a")


def _a_string(mem: AgentMemory) -> object:
    return mem.set("a", 1)


def test_a_write_whose_result_depends_on_redis_is_read_back(
    stack: amber.Stack, uid: Callable[[str], str], reads: list[str]
) -> None:
    agent = _saved(stack, uid, reads, _a_list)
    agent.l1_cache.rpush("log", "b")
    _saved_by_reading(stack, agent, reads)


def test_a_refused_batch_leaves_nothing_assumed(
    stack: amber.Stack, uid: Callable[[str], str], reads: list[str]
) -> None:
    agent = _saved(stack, uid, reads, _a_list)
    mem = agent.l1_cache
    mem.set("x", 1)
    with pytest.raises(WrongType), mem.batch() as b:
        b.set("y", 2).set("log", "not a list")
    save_step(stack, agent)
    assert reads == [agent.agent_id]  # a failed call spoils what the process knows
    exact(stack, agent.agent_id)
    assert "y" not in stack.snapshotter.stored(agent.agent_id).snap.memory  # type: ignore[union-attr]


def test_a_memory_redis_lost_after_the_writes_is_saved_as_written(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """The checkpoint holds what the agent wrote and Redis acknowledged, so the memory
    comes back from PostgreSQL as the agent left it."""
    agent = _agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch() as b:
        b.set("a", "1").set("b", "2")
    save_step(stack, agent)
    mem.set("a", "changed")
    k = stack.keys
    aid = agent.agent_id
    stack.redis.delete(
        *(mem.key(n) for n in ("a", "b")), k.l1_index(aid), k.l1_seq(aid), k.l1_epoch(aid)
    )
    save_step(stack, agent)
    report = stack.recovery.recover_agent_state(aid, agent.analysis_id, Writer.agent_type)
    assert report.verified
    restored = read_memory(stack.redis, k, aid).memory
    assert restored["a"].value == b"changed" and restored["b"].value == b"2"


OPS = st.sampled_from(
    ["bset", "bdel", "set", "del", "rpush", "expire", "other", "wrong",
     "dset", "ddel", "dread", "dother"]
)  # fmt: skip
"""Writes of a step: ``d*`` are deferred batches (``batch(defer=True)``), sent with the save."""


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.lists(st.tuples(OPS, st.integers(0, 6)), min_size=0, max_size=6),
        min_size=1,
        max_size=6,
    )
)
def test_every_save_stores_the_memory_redis_holds(
    stack: amber.Stack, steps: list[list[tuple[str, int]]]
) -> None:
    agent = Writer(str(uuid.uuid4()), "AAPL", stack.memory(f"kw-{uuid.uuid4().hex[:8]}"))
    mem, other = agent.l1_cache, stack.memory(agent.agent_id)
    for n, step in enumerate(steps):
        for op, i in step:
            name = f"k{i}"
            if op in ("dset", "ddel", "dread"):
                with mem.batch(defer=True) as b:
                    b.delete(name)
                    if op != "ddel":
                        b.set(name, f"d{n}-{i}")
                if op == "dread":
                    assert mem.get(name) == f"d{n}-{i}".encode()
            elif op == "dother":  # another object's write between the staging and the save
                with mem.batch(defer=True) as b:
                    b.set("staged", n)
                other.delete(name)
                other.set(name, f"other-{n}")
            elif op in ("bset", "bdel"):
                with mem.batch() as b:
                    b.delete(name)
                    if op == "bset":
                        b.set(name, f"{n}-{i}")
            elif op == "set":
                mem.delete(name)
                mem.set(name, n)
            elif op == "del":
                mem.delete(name)
            elif op == "rpush":
                mem.delete(name)
                mem.rpush(name, n, i)
            elif op == "expire":
                mem.delete(name)
                mem.set(name, "owned")
                mem.expire(name, 3600)
            elif op == "other":  # another object's write, then the agent's own
                other.delete(name)
                other.set(name, f"other-{n}")
                mem.set("own", n)
            else:
                mem.delete(name)
                mem.set(name, "s")
                with pytest.raises(WrongType), mem.batch() as b:
                    b.set("k-new", 1).rpush(name, "x")
        save_step(stack, agent)
        if stack.snapshotter.stored(agent.agent_id) is None:  # the next save reads Redis
            save_step(stack, agent)
        exact(stack, agent.agent_id)


def test_an_object_written_to_at_length_without_a_save_keeps_no_copy(
    stack: amber.Stack, uid: Callable[[str], str], reads: list[str]
) -> None:
    from amber.memory.known import MAX_BYTES

    agent = _saved(stack, uid, reads, _a_string)
    mem = agent.l1_cache
    chunk = b"x" * (256 * 1024)
    for i in range(MAX_BYTES // len(chunk) + 2):
        mem.set(f"big{i % 3}", chunk + str(i).encode())
    assert mem.known.values == {} and not mem.known.sound  # past the bound: nothing kept
    _saved_by_reading(stack, agent, reads)
