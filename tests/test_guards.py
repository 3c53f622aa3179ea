"""The guards that keep copies from going backwards, each broken on purpose with real bytes.

Every test here failed before the guard existed: a stale writer replaced a newer
checkpoint, a flipped bit in snapshot metadata let an older memory win, a 40 KB
zstd frame expanded without bound, a key of the wrong type aborted recovery, a
write that bypassed amber was carried over stale, pause/resume reset own TTLs,
and an empty memory was snapshotted over a full one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import cast

import orjson
import pytest
import zstandard

import amber
from amber import codec
from amber.agents import BaseAgent
from amber.checkpoints.delta import value_of
from amber.checkpoints.model import seal, unseal
from amber.errors import CheckpointConflict, ConsistencyError, MemoryLost
from amber.memory import AgentMemory, read_memory

from .conftest import on_cluster
from .memory.conftest import agent_id, fill, insert_checkpoint, mem

__all__ = ["agent_id", "mem"]  # fixtures shared with the memory tests


class Two(BaseAgent):
    agent_type = "guard_agent"
    subtasks = ("one", "two")

    def run_subtask(self, name: str) -> str:
        self.l1_cache.set(f"note:{name}", name)
        return name


def _agent(stack: amber.Stack, uid: Callable[[str], str], aid: str | None = None) -> Two:
    return Two(aid or str(uuid.uuid4()), "AAPL", stack.memory(uid("guard")))


def _filled(
    stack: amber.Stack, uid: Callable[[str], str], dual_write: bool = True
) -> tuple[Two, amber.Checkpoint]:
    """An agent with a full memory and subtask "one" checkpointed."""
    agent = _agent(stack, uid)
    fill(agent.l1_cache)
    agent.complete("one", agent.run_subtask("one"))
    return agent, stack.checkpointer.save_checkpoint(agent, "one", dual_write=dual_write)


def _lose(stack: amber.Stack, mem: AgentMemory, *extra: str) -> None:
    """Delete a memory's keys, index and epoch, as a Redis restart would."""
    k = stack.keys
    names = [mem.key(n) for n in mem.keys_list()]
    stack.redis.delete(*names, k.l1_index(mem.agent_id), k.l1_epoch(mem.agent_id), *extra)


def _seqs(stack: amber.Stack, aid: str) -> list[int]:
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT seq FROM agent_checkpoints WHERE analysis_id = %s ORDER BY seq", (aid,)
        ).fetchall()
    return [int(r[0]) for r in rows]


# -- checkpoints: a compare-and-set chain ------------------------------------------------
def test_a_stale_writer_never_replaces_a_newer_checkpoint(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    runner = _agent(stack, uid)
    stale = Two(runner.analysis_id, "AAPL", runner.l1_cache)  # continued from nothing
    runner.complete("one", runner.run_subtask("one"))
    stack.checkpointer.save_checkpoint(runner, "one")
    runner.complete("two", runner.run_subtask("two"))
    newest = stack.checkpointer.save_checkpoint(runner, "two")
    with pytest.raises(CheckpointConflict) as err:
        stack.checkpointer.save_checkpoint(stale, None)  # e.g. a pause built before "two"
    assert err.value.context["seq"] == 1
    assert _seqs(stack, runner.analysis_id) == [1, 2]
    restored = stack.checkpointer.restore_checkpoint(
        runner.analysis_id, Two.agent_type, agent_id=runner.agent_id
    )
    assert restored.checkpoint == newest and restored.head_seq == 2


def test_the_redis_copy_of_a_checkpoint_that_did_not_commit_is_never_used(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    """A refused save's Redis copies go out while PostgreSQL runs its insert (on a single
    Redis; a cluster client sends them after the commit), so a copy of the refused
    checkpoint, at the sequence PostgreSQL holds, replaces the committed one's: a restore
    still gives the committed checkpoint (the copy names another id)."""
    runner = _agent(stack, uid)
    stale = Two(runner.analysis_id, "AAPL", runner.l1_cache)  # continued from nothing
    runner.complete("one", runner.run_subtask("one"))
    one = stack.checkpointer.save_checkpoint(runner, "one")
    with pytest.raises(CheckpointConflict):
        stack.checkpointer.save_checkpoint(stale, None)  # also sequence 1: refused
    backup = stack.redis.get(stack.keys.checkpoint(runner.agent_id))
    replaced = value_of(unseal(cast(bytes, backup))[1], "checkpoint_id") != one.checkpoint_id
    assert replaced or on_cluster()
    restored = stack.checkpointer.restore_checkpoint(
        runner.analysis_id, Two.agent_type, agent_id=runner.agent_id
    )
    assert restored.checkpoint == one and restored.head_seq == 1
    if replaced:  # the refused save's copy is there, and not used
        assert restored.source == "postgresql"
        assert "redis_backup: at sequence 1, PostgreSQL at 1" in restored.skipped


def test_an_older_redis_backup_is_never_trusted_over_postgresql(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(stack, uid)
    agent.complete("one", agent.run_subtask("one"))
    stack.checkpointer.save_checkpoint(agent, "one")
    old_backup = stack.redis.get(stack.keys.checkpoint(agent.agent_id))
    agent.complete("two", agent.run_subtask("two"))
    newest = stack.checkpointer.save_checkpoint(agent, "two")
    # as after a crash between the PostgreSQL commit and the Redis write
    stack.redis.set(stack.keys.checkpoint(agent.agent_id), old_backup)  # type: ignore[arg-type]
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, Two.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "postgresql" and restored.checkpoint == newest
    assert "redis_backup: at sequence 1, PostgreSQL at 2" in restored.skipped


def test_redis_copies_are_never_written_over_newer_ones(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(stack, uid)
    agent.complete("one", agent.run_subtask("one"))
    first = stack.checkpointer.save_checkpoint(agent, "one")
    agent.complete("two", agent.run_subtask("two"))
    stack.checkpointer.save_checkpoint(agent, "two")
    key = stack.keys.checkpoint(agent.agent_id)
    newer = stack.redis.get(key)
    # a slow writer of checkpoint 1 arrives late: its copy is refused by the script
    snap = stack.snapshotter.take(agent.agent_id, full=True)
    backup = (key, seal(first, first.encode()), first.seq, 60_000)
    stack.snapshotter.write_cache(snap, stack.snapshotter.meta(snap), backup)
    assert stack.redis.get(key) == newer


# -- working memory: epochs ------------------------------------------------------------
def test_a_guarded_memory_refuses_to_read_or_write_after_a_loss(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    mem = stack.memory(uid("epoch"))
    mem.guard(None)
    mem.set("a", "1")
    assert mem.epoch is not None and mem.epoch.startswith("e")
    k = stack.keys
    stack.redis.delete(mem.key("a"), k.l1_index(mem.agent_id), k.l1_seq(mem.agent_id))
    stack.redis.delete(k.l1_epoch(mem.agent_id))  # what a Redis restart does
    with pytest.raises(MemoryLost):
        mem.get("a")  # not None: the memory is gone, not empty
    with pytest.raises(MemoryLost):
        mem.set("b", "2")
    assert stack.redis.exists(mem.key("b")) == 0


def test_an_empty_memory_is_never_snapshotted_over_a_full_one(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent, _ = _filled(stack, uid)
    _lose(stack, agent.l1_cache, stack.keys.l1_seq(agent.agent_id))
    with pytest.raises(MemoryLost, match="empty"):
        stack.checkpointer.save_checkpoint(agent, None, dual_write=True)
    assert _seqs(stack, agent.analysis_id) == [1]


def test_recovery_refuses_a_memory_recreated_after_its_snapshot(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    # wal mode numbers writes from its log, so a memory written again after a loss can
    # carry a higher sequence than the snapshot: only the epoch tells it lost data
    agent, _ = _filled(stack, uid)
    mem = agent.l1_cache
    seq = mem.sequence()
    _lose(stack, mem)
    stack.redis.set(stack.keys.l1_seq(mem.agent_id), seq + 100)
    stack.memory(mem.agent_id).set("after_the_loss", "x")
    report = stack.recovery.recover_agent_state(mem.agent_id, agent.analysis_id, Two.agent_type)
    assert report.path != "l1_existing" and "re-created" in report.reason
    assert mem.get("blob") is not None


# -- recovery reports what it checked ----------------------------------------------------
def test_verified_is_false_when_nothing_could_be_compared(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent, _ = _filled(stack, uid, dual_write=False)
    same = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Two.agent_type)
    assert same.path == "l1_existing" and same.verified  # at the snapshot's sequence: hashed
    agent.l1_cache.set("newer", "than the snapshot")
    newer = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Two.agent_type)
    assert newer.path == "l1_existing" and not newer.verified


# -- stored metadata is checksummed -----------------------------------------------------
def test_a_flipped_bit_in_snapshot_meta_falls_through_to_postgresql(
    stack: amber.Stack, mem: AgentMemory
) -> None:
    aid = str(uuid.uuid4())
    cid = insert_checkpoint(stack, aid, "strategy", mem.agent_id)
    meta = stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    key = stack.keys.l1_snapshot_meta(mem.agent_id)
    blob = bytearray(stack.redis.get(key))  # type: ignore[arg-type]
    blob[len(codec.SEAL_MAGIC) + 3] ^= 0x01  # a digit of the sequence in the header
    stack.redis.set(key, bytes(blob))
    with pytest.raises(ConsistencyError, match="checksum"):
        stack.snapshotter.latest_meta(mem.agent_id)
    stack.redis.delete(mem.key("blob"))  # L1 partly lost: a restore is needed
    report = stack.restorer.restore_from_snapshot(mem.agent_id, aid, "strategy")
    assert report is not None and report.source == "postgresql_checkpoint"
    assert read_memory(stack.redis, stack.keys, mem.agent_id).hash == meta.hash


@pytest.mark.parametrize("garbage", [b"not-a-number", b"99999999999999999999999"])
def test_garbage_in_the_sequence_key_is_repaired_from_a_snapshot(
    stack: amber.Stack, uid: Callable[[str], str], garbage: bytes
) -> None:
    agent, _ = _filled(stack, uid)
    stack.redis.set(stack.keys.l1_seq(agent.agent_id), garbage)
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Two.agent_type)
    assert report.path == "redis_secondary" and "unreadable" in report.reason
    assert agent.l1_cache.sequence() == report.seq


def test_a_sequence_or_epoch_key_of_another_type_is_repaired_from_a_snapshot(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent, _ = _filled(stack, uid)
    r, keys = stack.redis, stack.keys
    r.delete(keys.l1_seq(agent.agent_id), keys.l1_epoch(agent.agent_id))
    r.hset(keys.l1_seq(agent.agent_id), "x", "1")
    r.rpush(keys.l1_epoch(agent.agent_id), "e")
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Two.agent_type)
    assert report.path == "redis_secondary" and "unreadable" in report.reason
    assert agent.l1_cache.sequence() == report.seq
    assert r.type(keys.l1_epoch(agent.agent_id)) == b"string"


# -- decompression is bounded ------------------------------------------------------------
def test_a_decompression_bomb_is_corrupt_and_recovery_falls_through(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent, good = _filled(stack, uid)
    agent.complete("two", agent.run_subtask("two"))
    bad = stack.checkpointer.save_checkpoint(agent, "two", dual_write=True)
    bomb = zstandard.compress(b"\0" * (64 * 1024 * 1024))  # a few KB that claim 64 MB
    assert len(bomb) < 10_000
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE agent_checkpoints SET state = %s, l1_snapshot = %s WHERE checkpoint_id = %s",
            (bomb, bomb, bad.checkpoint_id),
        )
    stack.redis.delete(stack.keys.checkpoint(agent.agent_id))
    restored = stack.checkpointer.restore_checkpoint(agent.analysis_id, Two.agent_type)
    assert restored.checkpoint.checkpoint_id == good.checkpoint_id
    assert restored.head_seq == 2  # the next checkpoint still follows the newest row
    assert any("claims 67108864 bytes" in s for s in restored.skipped)
    stack.redis.delete(stack.keys.l1_snapshot(agent.agent_id))
    report = stack.restorer.restore_from_snapshot(agent.agent_id, agent.analysis_id, "guard_agent")
    assert report is not None and report.hash == good.l1_snapshot_hash
    with pytest.raises(codec.CodecError, match="claims"):
        codec.unpack(bomb, 1024)
    assert len(codec.unpack(bomb, 64 * 1024 * 1024)) == 64 * 1024 * 1024  # as recorded: fine


# -- a tier holding a key of the wrong type is skipped -----------------------------------
def test_a_wrong_type_in_a_recovery_tier_is_skipped_with_its_reason(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent, _ = _filled(stack, uid)
    for key in (
        stack.keys.l1_snapshot(agent.agent_id),
        stack.keys.l1_snapshot_meta(agent.agent_id),
        stack.keys.checkpoint(agent.agent_id),
    ):
        stack.redis.delete(key)
        stack.redis.hset(key, "field", "value")
    stack.redis.delete(agent.l1_cache.key("blob"))  # L1 partly lost
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Two.agent_type)
    assert report.path == "postgresql_checkpoint" and report.verified
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, Two.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "postgresql"
    assert restored.skipped and "another type" in restored.skipped[0]


# -- a write that bypassed amber: single writer, and full reads see it ------------------
def test_only_the_runner_writes_and_full_reads_see_writes_that_bypassed_amber(
    stack: amber.Stack, mem: AgentMemory
) -> None:
    # Saves read only what amber's write path recorded (O(changes)); amber's own writers
    # are one runner per analysis (its lock). A client that writes working-memory keys
    # behind amber's back is outside that contract: every full read sees what it did.
    stored = stack.snapshotter.take(mem.agent_id)
    stack.snapshotter.store(stored)
    for name, write in [
        ("current_subtask", lambda key: stack.redis.set(key, "changed by redis-cli")),
        ("aapl_historical_roi", lambda key: stack.redis.rpush(key, "0.99")),
        ("tickers", lambda key: stack.redis.srem(key, "T7")),
    ]:
        write(mem.key(name))
    full = stack.snapshotter.take(mem.agent_id, full=True)  # recovery, pause, verify
    assert full.hash == read_memory(stack.redis, stack.keys, mem.agent_id).hash != stored.hash
    assert full.memory["current_subtask"].value == b"changed by redis-cli"
    mem.set("through_amber", "seen")  # a write through amber is in the very next save
    assert "through_amber" in stack.snapshotter.take(mem.agent_id).changed


# -- own TTLs survive pause and resume -----------------------------------------------------
def test_own_ttls_survive_pause_resume_and_restore(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(stack, uid)
    mem = agent.l1_cache
    mem.set("short_lived", "cache")
    mem.set("ordinary", "note")
    assert mem.expire("short_lived", 600)
    stack.ttl_manager.extend_ttl_on_pause(agent.agent_id)
    assert 0 < mem.ttl("short_lived") <= 600
    assert mem.ttl("ordinary") > stack.settings.active_ttl
    stack.ttl_manager.restore_active_ttl_on_resume(agent.agent_id)
    assert 0 < mem.ttl("short_lived") <= 600
    agent.complete("one", agent.run_subtask("one"))
    stack.checkpointer.save_checkpoint(agent, "one", dual_write=True)
    stack.redis.delete(mem.key("ordinary"))  # partly lost: restore from the snapshot
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, Two.agent_type)
    assert report.path == "redis_secondary"
    assert 0 < mem.ttl("short_lived") <= 600 and mem.get("ordinary") == b"note"
    entry = stack.redis.hget(stack.keys.l1_index(agent.agent_id), "short_lived")
    assert entry is not None and entry.endswith(b":own")


@pytest.mark.parametrize("stored", [False, True], ids=["compressed", "stored as it is"])
def test_sealed_values_detect_every_flipped_byte(stored: bool) -> None:
    raw = orjson.dumps({"k": "v" * 50})
    blob = codec.seal(42, raw, codec.store(raw) if stored else None)
    assert codec.unseal(blob) == (42, raw)
    assert (len(blob) - codec.SEAL_HEADER > len(raw)) == stored  # a frame around the bytes
    for i in range(len(blob)):
        bad = bytearray(blob)
        bad[i] ^= 0x10
        with pytest.raises(codec.CodecError):
            codec.unseal(bytes(bad))


def test_a_guarded_read_of_a_lost_key_is_memory_lost_not_none(
    stack: amber.Stack, uid: Callable[[str], str]
) -> None:
    mem = stack.memory(uid("partial"))
    mem.guard(None)
    mem.set("cached_response", "expensive")
    mem.set("short", "x")
    assert mem.expire("short", 600)
    stack.redis.delete(mem.key("cached_response"))  # evicted: the index still lists it
    with pytest.raises(MemoryLost):
        mem.get("cached_response")
    stack.redis.delete(mem.key("short"))  # an own TTL running out is meant
    assert mem.get("short") is None and mem.get("never_written") is None
