"""``AgentMemory.batch(defer=True)``: sets and deletes staged in the process, sent to Redis
with the next save's copies while PostgreSQL commits the memory they make.

A checkpoint never names a memory Redis does not hold without the save saying so: when
Redis does not take the staged writes as planned, the save (already committed) raises,
and the memory is recovered from that checkpoint, which holds them.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

import amber
from amber.checkpoints.rows import CheckpointRows
from amber.engines.later import Pending
from amber.errors import CheckpointConflict, Fenced, MemoryLost, StoreUnavailable, WrongType
from amber.memory import AgentMemory, known, read_memory
from amber.memory.recovery import MemoryMark

from ..conftest import on_cluster
from .conftest import Writer, exact, save_step

OVERLAPPED = pytest.mark.skipif(
    on_cluster(),
    reason="a cluster client has no connection of its own to send them with the copies:"
    " the save applies them first, the ordinary way",
)
"""Tests of staged writes sent with the save's copies, while PostgreSQL commits."""


def _saved_agent(stack: amber.Stack, uid: Callable[[str], str], guarded: bool = False) -> Writer:
    """An agent whose memory holds a=1, b=1 and a list, saved once."""
    agent = Writer(str(uuid.uuid4()), "AAPL", stack.memory(uid("deferred")))
    mem = agent.l1_cache
    if guarded:
        mem.guard(None)
    with mem.batch() as b:
        b.set("a", 1).set("b", 1).rpush("log", "x")
    save_step(stack, agent)
    return agent


def _raw(stack: amber.Stack, mem: AgentMemory, name: str) -> Any:
    return stack.redis.get(mem.key(name))


@OVERLAPPED
def test_a_deferred_batch_goes_to_redis_with_the_save(
    stack: amber.Stack, uid: Callable[[str], str], reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    real = Pending.send_now

    def counted(self: Pending, commands: list[Any]) -> bool:
        sent.append(len(commands))
        return real(self, commands)

    monkeypatch.setattr(Pending, "send_now", counted)
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    reads.clear()
    with mem.batch(defer=True) as b:
        b.set("a", "two").delete("b").set("c", b"\xff")
    assert b.results == []
    assert _raw(stack, mem, "a") == b"1" and mem.staged  # not in Redis yet
    sent.clear()
    cp = save_step(stack, agent)
    assert sent == [2]  # the staged writes and the copies, in one write to Redis
    assert not mem.staged and reads == []  # built from the staged values, not read back
    assert _raw(stack, mem, "a") == b"two" and _raw(stack, mem, "b") is None
    exact(stack, agent.agent_id)
    assert cp.l1_snapshot_hash == read_memory(stack.redis, stack.keys, agent.agent_id).hash
    mem.set("a", "three")  # the next writes continue from the staged ones' sequence
    save_step(stack, agent)
    assert reads == []
    exact(stack, agent.agent_id)


def test_a_read_or_write_applies_the_staged_writes_first(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    assert mem.get("a") == b"two" and not mem.staged
    with mem.batch(defer=True) as b:
        b.delete("a")
    assert "a" not in mem.keys_list()
    with mem.batch(defer=True) as b:
        b.set("d", "1")
    mem.rpush("log", "y")  # a write: the staged one goes first, in order
    assert mem.get("d") == b"1"
    save_step(stack, agent)
    exact(stack, agent.agent_id)


def test_a_batch_of_other_writes_is_applied_when_its_block_ends(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("a", "two").rpush("log", "y")
    assert b.results == [True, 2] and not mem.staged
    with pytest.raises(WrongType), mem.batch(defer=True) as b:
        b.rpush("a", "not a list")
    assert mem.get("a") == b"two"


def test_a_staged_set_over_another_type_is_refused_by_the_save(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """The save checks staged sets against the types its snapshot holds; a set over the
    list is applied the ordinary way, refused, and nothing is committed."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("a", "two").set("log", "a string")
    seq = agent.checkpoint_seq
    with pytest.raises(WrongType):
        save_step(stack, agent)
    assert agent.checkpoint_seq == seq and mem.get("a") == b"1"


@OVERLAPPED
@pytest.mark.parametrize("guarded", [False, True])
def test_staged_writes_redis_did_not_take_are_recovered_from_the_checkpoint(
    stack: amber.Stack, uid: Callable[[str], str], guarded: bool
) -> None:
    """Redis lost the memory between the batch and the save: the checkpoint commits with
    the staged writes, the save says working memory did not take them, and recovering
    from that checkpoint gives the memory the agent wrote."""
    agent = _saved_agent(stack, uid, guarded)
    mem, k, aid = agent.l1_cache, stack.keys, agent.agent_id
    with mem.batch(defer=True) as b:
        b.set("a", "two").delete("b")
    stack.redis.delete(*(mem.key(n) for n in ("a", "b", "log")), k.l1_index(aid),
                       k.l1_seq(aid), k.l1_epoch(aid))  # fmt: skip
    with pytest.raises(MemoryLost, match="is in PostgreSQL with the writes deferred to it"):
        save_step(stack, agent)
    assert stack.checkpointer.heads(agent.analysis_id) == {Writer.agent_type: agent.checkpoint_seq}
    report = stack.recovery.recover_agent_state(aid, agent.analysis_id, Writer.agent_type)
    assert report.verified and report.path != "l1_existing"
    restored = read_memory(stack.redis, k, aid).memory
    assert restored["a"].value == b"two" and "b" not in restored
    assert [v for v in restored["log"].value] == [b"x"]


@OVERLAPPED
def test_without_the_memory_in_the_row_a_lost_memory_is_recovered_from_the_saves_copy(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """Redis lost the memory between the batch and a save whose row does not hold it
    (``hybrid``): the checkpoint commits, the save says Redis did not take the writes
    and that the memory is in Redis's copy alone, which it wrote after the commit, and
    recovering gives the memory the agent wrote, current."""
    agent = _saved_agent(stack, uid, guarded=True)
    mem, k, aid = agent.l1_cache, stack.keys, agent.agent_id
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    stack.redis.delete(*(mem.key(n) for n in ("a", "b", "log")), k.l1_index(aid),
                       k.l1_seq(aid), k.l1_epoch(aid), k.l1_snapshot(aid),
                       k.l1_snapshot_meta(aid))  # fmt: skip
    name = agent.next_subtask()
    assert name is not None
    agent.complete(name, name)
    with pytest.raises(MemoryLost, match="its memory in Redis's copy of it alone"):
        stack.checkpointer.save_checkpoint(agent, name, dual_write=False)
    assert stack.checkpointer.heads(agent.analysis_id) == {Writer.agent_type: agent.checkpoint_seq}
    report = stack.recovery.recover_agent_state(
        aid, agent.analysis_id, Writer.agent_type, want=agent.checkpoint_l1
    )
    assert report.current and report.path == "redis_secondary", report
    restored = read_memory(stack.redis, k, aid).memory
    assert restored["a"].value == b"two" and restored["b"].value == b"1"


def _break_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every send of a save's Redis commands fails, as on a connection lost meanwhile."""
    real = Pending.send_now

    def broken(self: Pending, commands: list[Any]) -> bool:
        def lost(*args: Any, **kwargs: Any) -> None:
            raise redis.ConnectionError("connection lost")

        self.conn.send_packed_command = lost  # type: ignore[method-assign]
        try:
            return real(self, commands)
        finally:
            del self.conn.send_packed_command

    monkeypatch.setattr(Pending, "send_now", broken)


@OVERLAPPED
def test_staged_writes_whose_send_fails_once_the_insert_went_out_are_in_the_checkpoint(
    stack: amber.Stack, uid: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The insert goes out before the staged writes do, so PostgreSQL may commit while
    their send fails: the save says so (``MemoryLost``), the checkpoint holds them, and
    recovering the memory from it gives what the agent wrote."""
    agent = _saved_agent(stack, uid)
    mem, aid = agent.l1_cache, agent.agent_id
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    _break_sends(monkeypatch)
    with pytest.raises(MemoryLost, match="is in PostgreSQL with the writes deferred to it"):
        save_step(stack, agent)
    monkeypatch.undo()
    assert stack.checkpointer.heads(agent.analysis_id) == {Writer.agent_type: agent.checkpoint_seq}
    assert _raw(stack, mem, "a") == b"1" and not mem.staged
    report = stack.recovery.recover_agent_state(aid, agent.analysis_id, Writer.agent_type)
    assert report.verified
    assert read_memory(stack.redis, stack.keys, aid).memory["a"].value == b"two"


@OVERLAPPED
@pytest.mark.parametrize("where", ["_cache_commands", "meta"])
@pytest.mark.parametrize("deferred", [False, True])
def test_work_that_fails_once_the_insert_went_out_never_fails_a_committed_save_silently(
    stack: amber.Stack,
    uid: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    deferred: bool,
) -> None:
    """Building the copies raises after the insert went out (a bug, say): the checkpoint
    is committed, so the save must not report it as not written. Without deferred writes
    it returns, and the copies are written after the commit; with them it raises
    ``MemoryLost``, and the memory recovered from the checkpoint holds them."""
    agent = _saved_agent(stack, uid)
    mem, aid = agent.l1_cache, agent.agent_id
    with mem.batch(defer=deferred) as b:
        b.set("a", "two")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken")

    owner = stack.checkpointer if where == "_cache_commands" else stack.checkpointer.snapshotter
    monkeypatch.setattr(owner, where, broken)
    if deferred:
        with pytest.raises(MemoryLost, match="is in PostgreSQL with the writes deferred to it"):
            save_step(stack, agent)
    else:
        save_step(stack, agent)
    monkeypatch.undo()
    assert stack.checkpointer.heads(agent.analysis_id) == {Writer.agent_type: agent.checkpoint_seq}
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, Writer.agent_type, agent_id=aid
    )
    assert restored.checkpoint.seq == agent.checkpoint_seq
    if deferred:  # as a run recovers: to the memory of the checkpoint it continues from
        c = restored.checkpoint
        want = MemoryMark(c.l1_snapshot_seq, c.l1_snapshot_hash, c.l1_snapshot_epoch)
        report = stack.recovery.recover_agent_state(
            aid, agent.analysis_id, Writer.agent_type, want=want
        )
        assert report.verified and report.path != "l1_existing"
    assert read_memory(stack.redis, stack.keys, aid).memory["a"].value == b"two"
    cp = save_step(stack, agent)  # the next save goes on from it
    assert cp.seq == restored.checkpoint.seq + 1
    exact(stack, aid)


@OVERLAPPED
def test_another_objects_write_before_the_staged_ones_is_in_the_next_save(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """Another object wrote after the batch was staged: Redis applies the staged writes
    after it, in the same incarnation. The save commits what the agent wrote, loses
    nothing, and the next save reads what Redis holds."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    stack.memory(agent.agent_id).set("z", "another's")
    save_step(stack, agent)
    assert _raw(stack, mem, "a") == b"two" and _raw(stack, mem, "z") == b"another's"
    assert stack.snapshotter.stored(agent.agent_id) is None  # the next save reads Redis
    save_step(stack, agent)
    exact(stack, agent.agent_id)
    assert "z" in stack.snapshotter.stored(agent.agent_id).snap.memory  # type: ignore[union-attr]


def test_staged_writes_the_save_cannot_keep_in_hand_go_first_the_ordinary_way(
    stack: amber.Stack, uid: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """More was written than a memory object keeps for its save (``known.MAX_BYTES``):
    the snapshot must be read from Redis, which does not hold the staged writes yet, so
    they are applied first and the memory read whole. The checkpoint holds them."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    monkeypatch.setattr(known, "MAX_BYTES", 8)
    with mem.batch(defer=True) as b:
        b.set("a", "more than eight bytes")
    cp = save_step(stack, agent)
    assert not mem.staged and _raw(stack, mem, "a") == b"more than eight bytes"
    exact(stack, agent.agent_id)
    assert cp.l1_snapshot_hash == read_memory(stack.redis, stack.keys, agent.agent_id).hash


def test_a_snapshot_read_at_the_staged_sequence_is_not_taken_for_theirs(
    stack: amber.Stack, uid: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, when another object's one write brought Redis to the very sequence the
    staged writes were to take: the snapshot read is not theirs, whatever its sequence."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("b", "more than eight bytes")
    stack.memory(agent.agent_id).set("z", "another's")
    monkeypatch.setattr(known, "MAX_BYTES", 8)
    cp = save_step(stack, agent)
    whole = read_memory(stack.redis, stack.keys, agent.agent_id)
    assert cp.l1_snapshot_hash == whole.hash and whole.memory["b"].value == b"more than eight bytes"


@OVERLAPPED
def test_a_save_that_fails_keeps_the_staged_writes_redis_did_not_take(
    stack: amber.Stack, uid: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis could not be reached: the save fails before committing, and the writes stay
    staged. PostgreSQL refuses the insert after Redis took them: they are in Redis, not
    staged again, and the connection that carried them went back to its pool once."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    seq = agent.checkpoint_seq
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    monkeypatch.setattr(Pending, "hold", classmethod(lambda cls, client: None))
    with pytest.raises(StoreUnavailable, match="deferred memory writes"):
        save_step(stack, agent)
    assert agent.checkpoint_seq == seq and mem.staged and _raw(stack, mem, "a") == b"1"
    monkeypatch.undo()
    agent.checkpoint_seq = seq - 1  # a stale writer: the insert is refused
    with pytest.raises(CheckpointConflict):
        save_step(stack, agent)
    assert not mem.staged and _raw(stack, mem, "a") == b"two"
    idle = stack.redis.connection_pool._available_connections  # type: ignore[attr-defined]
    assert len(idle) == len({id(c) for c in idle})
    agent.checkpoint_seq = seq
    cp = save_step(stack, agent)
    assert cp.seq == seq + 1
    exact(stack, agent.agent_id)


@OVERLAPPED
def test_a_refused_send_after_a_failed_commit_stays_staged(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """PostgreSQL refuses the insert and Redis refuses the writes (a later run's fence):
    the writes were not applied, so they stay this object's, and the next write meets
    the same refusal rather than losing them silently."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    mem.fence(1)
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    stack.redis.set(stack.keys.l1_fence(agent.agent_id), 2)
    agent.checkpoint_seq -= 1
    with pytest.raises(CheckpointConflict):
        save_step(stack, agent)
    assert mem.staged
    with pytest.raises(Fenced):
        mem.set("b", "x")
    assert _raw(stack, mem, "a") == b"1"


@OVERLAPPED
def test_staged_writes_a_later_run_fenced_off_make_the_save_say_so(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    mem.fence(1)
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    stack.redis.set(stack.keys.l1_fence(agent.agent_id), 2)  # a later run took it over
    with pytest.raises(Fenced, match="deferred memory writes"):
        save_step(stack, agent)
    assert _raw(stack, mem, "a") == b"1"


def test_recovering_the_memory_drops_the_staged_writes(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """Writes staged against a memory that is then recovered (guarded anew) belong to the
    step that failed: they are never applied over the recovered memory."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("a", "from a failed step")
    report = stack.recovery.recover_agent_state(
        agent.agent_id, agent.analysis_id, Writer.agent_type
    )
    mem.guard(report.epoch)
    assert not mem.staged and mem.get("a") == b"1"


@pytest.mark.skipif(not on_cluster(), reason="a cluster client's way: see OVERLAPPED")
def test_on_a_cluster_the_save_applies_staged_writes_first(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("a", "two").delete("b")
    cp = save_step(stack, agent)
    assert not mem.staged and _raw(stack, mem, "a") == b"two" and _raw(stack, mem, "b") is None
    exact(stack, agent.agent_id)
    assert cp.l1_snapshot_hash == read_memory(stack.redis, stack.keys, agent.agent_id).hash


@OVERLAPPED
def test_without_the_memory_in_the_row_redis_has_it_before_the_insert_goes_out(
    stack: amber.Stack, uid: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row without the memory (``hybrid``) leaves Redis its only keeper: the staged
    writes reach Redis before the insert is sent, by the script's text, so a Redis whose
    script cache is cold runs them too. A kill once the insert went out cannot leave a
    committed checkpoint whose memory is nowhere."""
    agent = _saved_agent(stack, uid)
    mem = agent.l1_cache
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    monkeypatch.setattr(mem._batch_script, "sha", "0" * 40)  # a script cache without it
    seen: list[Any] = []
    real = CheckpointRows.insert

    def insert(self: CheckpointRows, *args: Any) -> str | None:
        assert args[3] is None and args[4] is None  # no memory in the row; nothing during
        time.sleep(0.05)  # what was sent before the insert has reached Redis by now
        seen.append(_raw(stack, mem, "a"))
        return real(self, *args)

    monkeypatch.setattr(CheckpointRows, "insert", insert)
    name = agent.next_subtask()
    assert name is not None
    agent.complete(name, name)
    stack.checkpointer.save_checkpoint(agent, name, dual_write=False)
    assert seen == [b"two"] and not mem.staged
    exact(stack, agent.agent_id)


@OVERLAPPED
def test_commands_that_cannot_be_packed_send_nothing_and_give_the_connection_back(
    stack: amber.Stack,
) -> None:
    pending = Pending.hold(stack.redis)
    assert pending is not None
    with pytest.raises(redis.DataError):
        pending.send_now([("SET", "k", object())])
    assert pending.done and pending.count == 0
    assert Pending.send(stack.redis, "SET", "k", object()) is None  # the caller's call says why


@OVERLAPPED
def test_commands_sent_behind_others_are_read_in_the_same_wait(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """``send_more`` puts commands behind those sent, before any reply is read: every
    reply comes back in order. A send on a lost connection drops it, and every reply due
    is the error that lost it; nothing can be sent once the replies were read."""
    key = stack.keys.prefix + ":" + uid("more")
    pending = Pending.hold(stack.redis)
    assert pending is not None
    assert pending.send_now([("SET", key, b"1")])
    assert pending.send_more([("INCR", key), ("GET", key)])
    assert pending.replies() == [b"OK", 2, b"2"]
    assert not pending.send_more([("INCR", key)])  # read already: nothing more goes out
    lost = Pending.hold(stack.redis)
    assert lost is not None and lost.send_now([("GET", key)])
    lost.conn._sock.shutdown(socket.SHUT_RDWR)  # type: ignore[attr-defined]
    lost.conn._sock.close()  # type: ignore[attr-defined]
    assert not lost.send_more([("INCR", key)])
    got = lost.replies()
    assert len(got) == 2 and all(isinstance(r, redis.ConnectionError) for r in got)
    assert stack.redis.get(key) == b"2"  # the pool serves on
    stack.redis.delete(key)


@OVERLAPPED
def test_replies_read_early_are_kept_for_later_and_the_connection_goes_back_once(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """A save reads Redis's replies while PostgreSQL commits, and uses them after."""
    key = stack.keys.prefix + ":" + uid("early")
    pending = Pending.hold(stack.redis)
    assert pending is not None
    assert pending.send_now([("SET", key, b"v"), ("INCR", key)])
    first = pending.replies()
    assert first[0] == b"OK" and isinstance(first[1], redis.ResponseError)
    first[0] = "changed by its caller"
    assert pending.replies() == [b"OK", first[1]] and pending.done  # kept, as read
    assert stack.redis.get(key) == b"v"  # the pool has its connection back, and serves
    stack.redis.delete(key)


@OVERLAPPED
@pytest.mark.parametrize("overlaps", [True, False], ids=["in flight", "cannot overlap"])
def test_the_replies_are_read_while_the_insert_is_in_flight_and_never_before_it(
    stack: amber.Stack,
    uid: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    overlaps: bool,
) -> None:
    """Where the insert cannot overlap (its copies go first), waiting on Redis there
    would come before the insert, not beside it: the replies are then read after it."""
    agent = _saved_agent(stack, uid)
    inserted: list[bool] = []
    seen: list[bool] = []
    real_insert, real_replies = CheckpointRows._insert, Pending.replies

    def insert(self: CheckpointRows, *args: Any, **kwargs: Any) -> Any:
        out = real_insert(self, *args, **kwargs)
        inserted.append(True)
        return out

    def replies(self: Pending) -> list[Any]:
        seen.append(bool(inserted))
        return real_replies(self)

    monkeypatch.setattr(CheckpointRows, "_insert", insert)
    monkeypatch.setattr(Pending, "replies", replies)
    if not overlaps:
        monkeypatch.setattr("amber.engines.overlap.Overlapped.usable", lambda conn: False)
    with agent.l1_cache.batch(defer=True) as b:
        b.set("a", 2)
    save_step(stack, agent)
    assert seen and seen[0] is (not overlaps)  # first read: before the result, or after
    assert agent.l1_cache.get("a") == b"2"
    exact(stack, agent.agent_id)


@OVERLAPPED
def test_without_the_memory_in_the_row_a_failed_send_refuses_the_save_before_the_insert(
    stack: amber.Stack, uid: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In ``hybrid`` the checkpoint would not hold the staged writes: a send that fails
    commits nothing, and they stay staged for the next save."""
    agent = _saved_agent(stack, uid)
    mem, seq = agent.l1_cache, agent.checkpoint_seq
    with mem.batch(defer=True) as b:
        b.set("a", "two")
    _break_sends(monkeypatch)
    name = agent.next_subtask()
    assert name is not None
    agent.complete(name, name)
    with pytest.raises(StoreUnavailable, match="deferred memory writes"):
        stack.checkpointer.save_checkpoint(agent, name, dual_write=False)
    monkeypatch.undo()
    assert stack.checkpointer.heads(agent.analysis_id) == {Writer.agent_type: seq}
    assert agent.checkpoint_seq == seq and mem.staged and _raw(stack, mem, "a") == b"1"
    stack.checkpointer.save_checkpoint(agent, name, dual_write=False)
    assert _raw(stack, mem, "a") == b"two" and not mem.staged
