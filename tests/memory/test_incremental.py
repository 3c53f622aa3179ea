"""Saves that cost what changed: batched writes, snapshots read and stored as deltas.

A save reads only the keys written since the last stored snapshot (the write path
records them), the memory hash follows in O(changes), the Redis secondary takes the
changed fields, and PostgreSQL stores a chain: a whole snapshot, then deltas. Each
test checks the result against a whole read, so O(changes) never means "trusted".
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amber
from amber import codec
from amber.agents import BaseAgent
from amber.errors import CheckpointConflict, ConsistencyError, WrongType
from amber.memory import read_memory
from amber.memory.apply import apply_memory
from amber.memory.snapshot import MAX_CHAIN


class Steps(BaseAgent):
    agent_type = "steps_agent"
    subtasks = tuple(f"s{i}" for i in range(MAX_CHAIN + 4))

    def run_subtask(self, name: str) -> str:
        return name


def _agent(stack: amber.Stack, uid: Callable[[str], str]) -> Steps:
    return Steps(str(uuid.uuid4()), "AAPL", stack.memory(uid("inc")))


def test_a_batch_applies_in_one_script_or_not_at_all(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    mem = stack.memory(uid("batch"))
    with mem.batch() as b:
        b.set("a", "1").rpush("log", "x", "y").hset("h", {"f": "v"}).sadd("s", "m")
        b.zadd("z", {"m": 2.5}).delete("nothing")
    assert b.results == [1, 2, 1, 1, 1, 0]
    seq = mem.sequence()
    assert mem.get("a") == b"1" and mem.lrange("log", 0, -1) == [b"x", b"y"]
    with pytest.raises(WrongType), mem.batch() as bad:
        bad.set("b", "2").rpush("a", "not a list")  # "a" is a string
    assert mem.get("b") is None and mem.sequence() == seq  # nothing of it applied
    with mem.batch() as big:
        big.rpush("many", *range(20_000))
    assert mem.llen("many") == 20_000


def test_a_snapshot_reads_only_what_changed_and_hashes_like_a_whole_read(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    mem = stack.memory(uid("inc"))
    with mem.batch() as b:
        for i in range(200):
            b.set(f"k{i}", i)
    stack.snapshotter.store(stack.snapshotter.take(mem.agent_id))
    with mem.batch() as b:
        b.set("k1", "changed").delete("k2").hset("new", {"f": "v"})
    snap = stack.snapshotter.take(mem.agent_id)
    assert snap.base_seq is not None
    assert snap.changed == {"k1", "new"} and snap.removed == {"k2"}
    whole = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert snap.hash == whole.hash and snap.memory == whole.memory
    stack.snapshotter.store(snap)
    same = stack.snapshotter.take(mem.agent_id)
    assert same.changed == frozenset() and same.hash == whole.hash


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["set", "del", "rpush"]), st.integers(0, 12)),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_the_hash_in_o_changes_always_equals_a_whole_read(
    stack: amber.Stack, steps: list[list[tuple[str, int]]]
) -> None:
    mem = stack.memory(f"prop-{uuid.uuid4().hex[:8]}")
    for step in steps:
        for op, i in step:
            if op == "set":
                mem.set(f"s{i}", f"v{i}-{len(step)}")
            elif op == "rpush":
                mem.delete(f"s{i}")
                mem.rpush(f"l{i}", i, len(step))
            else:
                mem.delete(f"s{i}", f"l{i}")
        snap = stack.snapshotter.take(mem.agent_id)
        whole = read_memory(stack.redis, stack.keys, mem.agent_id)
        assert snap.hash == whole.hash == codec.memory_hash(whole.memory)
        stack.snapshotter.store(snap)


def _save(stack: amber.Stack, agent: Steps) -> str | None:
    """The agent's next subtask, checkpointed with its memory; the memory's hash."""
    name = agent.next_subtask()
    assert name is not None
    agent.complete(name, agent.run_subtask(name))
    return stack.checkpointer.save_checkpoint(agent, name, dual_write=True).l1_snapshot_hash


def _saves_of_one_key_each(stack: amber.Stack, agent: Steps, n: int) -> list[str | None]:
    """``n`` checkpoints, each after one more key was written; their memories' hashes."""
    hashes = []
    for i in range(n):
        agent.l1_cache.set(f"k{i}", f"v{i}")
        hashes.append(_save(stack, agent))
    return hashes


def _stored_is_exact(stack: amber.Stack, agent_id: str) -> None:
    stored = stack.snapshotter.stored(agent_id)
    whole = read_memory(stack.redis, stack.keys, agent_id)
    assert stored is not None
    assert stored.snap.memory == whole.memory and stored.snap.hash == whole.hash


def test_saves_that_take_over_the_last_snapshot_never_touch_one_a_caller_holds(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(stack, uid)
    mem, aid = agent.l1_cache, agent.agent_id
    with mem.batch() as b:
        for i in range(100):
            b.set(f"k{i}", i)
    _save(stack, agent)
    mem.set("k1", "one")
    _save(stack, agent)  # read against the save before, whose maps it takes over
    _stored_is_exact(stack, aid)
    mine = stack.snapshotter.take(aid)  # a caller's snapshot, then stored by the caller
    held = dict(mine.memory)
    stack.snapshotter.store(mine)
    mem.set("k2", "two")
    _save(stack, agent)
    mem.set("k3", "three")
    _save(stack, agent)
    assert mine.memory == held  # copied, never taken over
    _stored_is_exact(stack, aid)
    mem.set("k4", "four")
    agent.checkpoint_seq -= 1  # a save that fails: a newer checkpoint exists
    with pytest.raises(CheckpointConflict):
        stack.checkpointer.save_checkpoint(agent, None)
    agent.checkpoint_seq += 1
    assert stack.snapshotter.stored(aid) is None  # its base is gone: read whole next
    mem.set("k5", "five")
    _save(stack, agent)
    _stored_is_exact(stack, aid)
    _forget_redis(stack, aid)
    report = stack.recovery.recover_agent_state(aid, agent.analysis_id, Steps.agent_type)
    assert report.path == "postgresql_checkpoint" and report.verified
    restored = read_memory(stack.redis, stack.keys, aid).memory
    assert restored["k4"].value == b"four" and restored["k5"].value == b"five"


def _rows(stack: amber.Stack, aid: str) -> list[tuple[int, int | None]]:
    with stack.pg.connection() as conn:
        return [
            (int(s), None if b is None else int(b))
            for s, b in conn.execute(
                "SELECT seq, l1_snapshot_base FROM agent_checkpoints WHERE analysis_id = %s"
                " AND l1_snapshot IS NOT NULL ORDER BY seq",
                (aid,),
            ).fetchall()
        ]


def _forget_redis(stack: amber.Stack, agent_id: str) -> None:
    k = stack.keys
    mem = stack.memory(agent_id)
    stack.redis.delete(
        *(mem.key(n) for n in mem.keys_list()),
        k.l1_index(agent_id),
        k.l1_seq(agent_id),
        k.l1_epoch(agent_id),
        k.l1_changes(agent_id),
        k.l1_snapshot(agent_id),
        k.l1_snapshot_meta(agent_id),
    )


def test_postgresql_stores_a_chain_of_deltas_and_restores_it_verified(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch() as b:
        for i in range(300):
            b.set(f"k{i}", "x" * 50)
    for i in range(MAX_CHAIN + 3):
        mem.set(f"k{i}", f"step {i}")
        name = agent.next_subtask()
        assert name is not None
        agent.complete(name, agent.run_subtask(name))
        stack.checkpointer.save_checkpoint(agent, name, dual_write=True)
    rows = _rows(stack, agent.analysis_id)
    assert rows[0] == (1, None)  # whole, then deltas on the row before, then whole again
    assert [b for _, b in rows[1 : MAX_CHAIN + 1]] == list(range(1, MAX_CHAIN + 1))
    assert rows[MAX_CHAIN + 1][1] is None
    expected = read_memory(stack.redis, stack.keys, agent.agent_id)
    _forget_redis(stack, agent.agent_id)
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Steps.agent_type)
    assert report.path == "postgresql_checkpoint" and report.verified
    assert read_memory(stack.redis, stack.keys, agent.agent_id).hash == expected.hash


def test_a_format_1_snapshot_in_postgresql_is_restored(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """A whole row written in format 1 (the hash of the sorted document, by an older
    amber) is checked in its own format and restored."""
    agent = _agent(stack, uid)
    agent.l1_cache.set("k", "v")
    agent.l1_cache.rpush("log", "a", "b")
    _save(stack, agent)
    with stack.pg.connection() as conn:
        blob, size = conn.execute(
            "SELECT l1_snapshot, l1_snapshot_size FROM agent_checkpoints WHERE analysis_id = %s",
            (agent.analysis_id,),
        ).fetchone()
        doc = {**codec.decode_document(codec.unpack(blob, size)), "format": 1}
        raw = orjson.dumps(doc)
        conn.execute(
            "UPDATE agent_checkpoints SET l1_snapshot = %s, l1_snapshot_size = %s,"
            " l1_snapshot_hash = %s WHERE analysis_id = %s",
            (codec.pack(raw), len(raw), codec.document_hash(doc), agent.analysis_id),
        )
    expected = read_memory(stack.redis, stack.keys, agent.agent_id).memory
    _forget_redis(stack, agent.agent_id)
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Steps.agent_type)
    assert report.path == "postgresql_checkpoint" and report.verified
    assert read_memory(stack.redis, stack.keys, agent.agent_id).memory == expected
    again = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Steps.agent_type)
    assert again.path == "l1_existing" and again.verified  # compared in format 1


def test_a_corrupt_delta_falls_back_to_the_row_before_it(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(stack, uid)
    hashes = _saves_of_one_key_each(stack, agent, 4)
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE agent_checkpoints SET l1_snapshot = %s, l1_snapshot_size = %s"
            " WHERE analysis_id = %s AND seq = 3",
            (
                codec.pack(b'{"format": 2, "base": 2, "set": {}, "del": ["k0"]}'),
                50,
                agent.analysis_id,
            ),
        )
    _forget_redis(stack, agent.agent_id)
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Steps.agent_type)
    assert report.path == "postgresql_checkpoint" and report.seq > 0
    assert read_memory(stack.redis, stack.keys, agent.agent_id).hash == hashes[1]


def test_a_chain_is_checked_at_its_newest_row_and_an_older_row_when_it_is_asked_for(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """Folding checks the newest row's hash on the chain's result; an older row's hash is
    checked when its snapshot is asked for (a fallback). A newest row that does not
    match makes the fold check every row, and the chain stops before it."""
    agent = _agent(stack, uid)
    hashes = _saves_of_one_key_each(stack, agent, 4)

    def tamper(seq: int) -> None:
        with stack.pg.connection() as conn:
            conn.execute(
                "UPDATE agent_checkpoints SET l1_snapshot_hash = %s"
                " WHERE analysis_id = %s AND seq = %s",
                ("0" * 64, agent.analysis_id, seq),
            )

    tamper(2)
    base, chain, error = stack.restorer._pg_chain(agent.analysis_id, Steps.agent_type)
    assert base == 1 and error is None and len(chain) == 4
    assert chain.loaded(-1).hash == hashes[3] and chain.loaded(2).hash == hashes[2]
    with pytest.raises(codec.CodecError, match="row 2 does not match"):
        chain.loaded(1)
    tamper(4)
    base, chain, error = stack.restorer._pg_chain(agent.analysis_id, Steps.agent_type)
    assert len(chain) == 1 and error is not None and "row 2" in error
    assert chain.loaded(-1).hash == hashes[0]


@pytest.mark.parametrize("bad", [4, 2, 1], ids=["the newest row", "a delta", "the whole row"])
def test_a_restore_over_a_lost_memory_falls_back_past_a_row_that_does_not_match(
    stack: amber.Stack, uid: Callable[[str], str], bad: int
) -> None:
    """Over a lost memory the newest snapshot is hashed while Redis writes it; when it
    does not match, the chain is folded again checking each row, and the newest row
    before the first that does not match is restored (or none: the rows after a bad one
    all build on it)."""
    agent = _agent(stack, uid)
    hashes = _saves_of_one_key_each(stack, agent, 4)
    with stack.pg.connection() as conn:  # the row's value of the key it wrote: v1 → vX
        where = " WHERE analysis_id = %s AND seq = %s"
        blob = conn.execute(
            "SELECT l1_snapshot FROM agent_checkpoints" + where, (agent.analysis_id, bad)
        ).fetchone()[0]  # type: ignore[index]
        raw = codec.unpack(blob).replace(f'"v{bad - 1}"'.encode(), b'"vX"')
        conn.execute(
            "UPDATE agent_checkpoints SET l1_snapshot = %s" + where,
            (codec.pack(raw), agent.analysis_id, bad),
        )
    keys = stack.keys
    stack.redis.delete(keys.l1_snapshot(agent.agent_id), keys.l1_snapshot_meta(agent.agent_id))
    apply_memory(stack.redis, keys, agent.agent_id, {}, 0, 60_000)  # as if Redis lost it
    if bad == 1:
        with pytest.raises(ConsistencyError):
            stack.restorer.restore_from_snapshot(
                agent.agent_id, agent.analysis_id, Steps.agent_type
            )
        assert read_memory(stack.redis, keys, agent.agent_id).memory == {}
        return
    report = stack.restorer.restore_from_snapshot(
        agent.agent_id, agent.analysis_id, Steps.agent_type
    )
    assert report is not None and report.hash == hashes[bad - 2] and report.seq > 0
    after = read_memory(stack.redis, keys, agent.agent_id)
    assert after.hash == hashes[bad - 2] and after.epoch == report.epoch


def test_every_row_of_a_folded_chain_is_the_memory_that_was_saved(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """The chain is applied once, in place; an older row (a fallback) is rebuilt by
    stepping back through what each newer delta replaced."""
    agent = _agent(stack, uid)
    mem = agent.l1_cache
    saved = []
    for i in range(6):
        with mem.batch() as b:
            b.set(f"k{i}", f"v{i}").set("shared", f"s{i}")
            if i % 2:
                b.delete(f"k{i - 1}")
            if i == 3:
                b.rpush("log", "a", "b")
        _save(stack, agent)
        saved.append(read_memory(stack.redis, stack.keys, agent.agent_id))
    assert [b for _, b in _rows(stack, agent.analysis_id)] == [None, 1, 2, 3, 4, 5]
    base, chain, error = stack.restorer._pg_chain(agent.analysis_id, Steps.agent_type)
    assert base == 1 and error is None and len(chain) == 6
    for k in [5, 2, 0, 4, 1, 3, -1]:  # in any order: stepping back never changes the chain
        loaded = chain.loaded(k)
        assert loaded.memory == saved[k].memory and loaded.hash == saved[k].hash


def test_a_secondary_that_is_not_the_deltas_base_is_written_whole(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    mem = stack.memory(uid("sec"))
    with mem.batch() as b:
        for i in range(50):
            b.set(f"k{i}", i)
    stack.snapshotter.store(stack.snapshotter.take(mem.agent_id))
    mem.set("k1", "changed")
    snap = stack.snapshotter.take(mem.agent_id)  # a delta on the stored snapshot
    assert snap.base_seq is not None
    stack.redis.delete(stack.keys.l1_snapshot_meta(mem.agent_id))  # the base went away
    stack.snapshotter.store(snap)
    loaded = stack.restorer.load_secondary(mem.agent_id)
    assert loaded is not None and loaded.stored_hash == loaded.hash == snap.hash
    assert len(loaded.memory) == 50
