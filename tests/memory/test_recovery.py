"""DualRecoveryStrategy: every path, and the partly-expired L1 of Flaw #25 D3."""

from __future__ import annotations

import uuid

import pytest

import amber
from amber import MemoryContended, codec
from amber.memory import AgentMemory, read_memory
from amber.memory.apply import Held
from amber.memory.chain import loaded_canon
from amber.memory.restore import ConsistencyVerifier

from .conftest import insert_checkpoint


def _setup(stack: amber.Stack, mem: AgentMemory) -> tuple[str, str]:
    analysis = str(uuid.uuid4())
    cid = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    meta = stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    return analysis, meta.hash


def test_l1_existing_path(stack: amber.Stack, mem: AgentMemory) -> None:
    analysis, _ = _setup(stack, mem)
    report = stack.recovery.recover_agent_state(mem.agent_id, analysis, "strategy")
    assert report.path == "l1_existing" and report.keys == 6 and report.verified


def test_l1_newer_than_snapshot_is_kept(stack: amber.Stack, mem: AgentMemory) -> None:
    analysis, _ = _setup(stack, mem)
    mem.set("progress_note", "after the checkpoint")
    report = stack.recovery.recover_agent_state(mem.agent_id, analysis, "strategy")
    assert report.path == "l1_existing" and mem.get("progress_note") is not None


def test_redis_secondary_path_after_l1_expiry(stack: amber.Stack, mem: AgentMemory) -> None:
    analysis, digest = _setup(stack, mem)
    k = stack.keys
    stack.redis.delete(
        *(mem.key(n) for n in mem.keys_list()), k.l1_index(mem.agent_id), k.l1_seq(mem.agent_id)
    )
    report = stack.recovery.recover_agent_state(mem.agent_id, analysis, "strategy")
    assert report.path == "redis_secondary" and report.keys == 6
    assert read_memory(stack.redis, k, mem.agent_id).hash == digest


def test_postgresql_path_when_redis_lost_everything(stack: amber.Stack, mem: AgentMemory) -> None:
    analysis, digest = _setup(stack, mem)
    k = stack.keys
    stack.redis.delete(
        *(mem.key(n) for n in mem.keys_list()),
        k.l1_index(mem.agent_id),
        k.l1_seq(mem.agent_id),
        k.l1_snapshot(mem.agent_id),
        k.l1_snapshot_meta(mem.agent_id),
    )
    report = stack.recovery.recover_agent_state(mem.agent_id, analysis, "strategy")
    assert report.path == "postgresql_checkpoint" and report.keys == 6
    assert read_memory(stack.redis, k, mem.agent_id).hash == digest


def test_d3_partly_expired_l1_restores_never_passes(stack: amber.Stack, agent_id: str) -> None:
    mem = stack.memory(agent_id)
    mem.set("current_subtask", "ma_review")
    mem.rpush("aapl_historical_roi", 0.15, 0.18, 0.12)  # 3 years
    mem.set("capital_allocation_score", 0.75)
    analysis, digest = _setup(stack, mem)
    # overnight: two keys expired; the ROI list is a stale 2-year version
    stack.redis.delete(
        mem.key("current_subtask"),
        mem.key("capital_allocation_score"),
        mem.key("aapl_historical_roi"),
    )
    stack.redis.rpush(mem.key("aapl_historical_roi"), b"0.15", b"0.18")
    report = stack.recovery.recover_agent_state(agent_id, analysis, "strategy")
    assert report.path == "redis_secondary" and "expired" in report.reason
    assert mem.lrange("aapl_historical_roi", 0, -1) == [b"0.15", b"0.18", b"0.12"]
    assert mem.get("capital_allocation_score") == b"0.75"
    assert read_memory(stack.redis, stack.keys, agent_id).hash == digest


def test_same_sequence_but_different_content_restores(stack: amber.Stack, mem: AgentMemory) -> None:
    analysis, _ = _setup(stack, mem)
    stack.redis.set(mem.key("current_subtask"), b"tampered")  # outside amber: no seq bump
    report = stack.recovery.recover_agent_state(mem.agent_id, analysis, "strategy")
    assert report.path == "redis_secondary" and mem.get("current_subtask") == b"ma_review"


def test_nothing_to_recover_is_empty(stack: amber.Stack, agent_id: str) -> None:
    report = stack.recovery.recover_agent_state(agent_id, uuid.uuid4(), "strategy")
    assert report.path == "empty" and report.keys == 0


def test_ttl_24h_to_14d_and_back(stack: amber.Stack, mem: AgentMemory) -> None:
    _setup(stack, mem)
    k, s = stack.keys, stack.settings
    touched = stack.ttl_manager.extend_ttl_on_pause(mem.agent_id)
    assert touched == 6
    for key in [
        mem.key("blob"),
        k.l1_index(mem.agent_id),
        k.l1_seq(mem.agent_id),
        k.l1_snapshot(mem.agent_id),
        k.l1_snapshot_meta(mem.agent_id),
    ]:
        assert s.active_ttl < stack.redis.ttl(key) <= s.paused_ttl == 14 * 24 * 3600
    stack.ttl_manager.restore_active_ttl_on_resume(mem.agent_id)
    assert 0 < stack.redis.ttl(mem.key("blob")) <= s.active_ttl == 24 * 3600


def test_a_restore_deletes_every_key_the_index_held_that_the_snapshot_does_not(
    stack: amber.Stack, mem: AgentMemory
) -> None:
    """The names the recovery read from the index are the keys the restore replaces: one
    written after the checkpoint is gone afterwards, a lost one is back, and an index
    entry whose key expired is dropped."""
    analysis, digest = _setup(stack, mem)
    mem.set("after_checkpoint", "not in the snapshot")
    mem.sadd("extra_set", "a", "b")
    stack.redis.delete(mem.key("current_subtask"))  # lost: the index still names it
    report = stack.recovery.recover_agent_state(mem.agent_id, analysis, "strategy")
    assert report.path == "redis_secondary" and report.keys == 6
    assert not stack.redis.exists(mem.key("after_checkpoint"), mem.key("extra_set"))
    assert set(mem.keys_list()) == set(read_memory(stack.redis, stack.keys, mem.agent_id).memory)
    assert "after_checkpoint" not in mem.keys_list() and mem.get("current_subtask") == b"ma_review"
    assert read_memory(stack.redis, stack.keys, mem.agent_id).hash == digest


def test_a_key_written_after_the_index_was_read_is_not_left_behind(
    stack: amber.Stack, mem: AgentMemory
) -> None:
    """The restore is told what the index named and at which sequence; a write since
    (here between the read and the restore) makes the script refuse, changing nothing,
    and the restore reads the index again: the late key goes with the rest."""
    analysis, digest = _setup(stack, mem)
    before = read_memory(stack.redis, stack.keys, mem.agent_id)
    held = Held((*before.memory, *before.missing), before.seq, before.epoch)
    mem.set("written_late", "after the index was read")
    report = stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy", held=held)
    assert report is not None and report.keys == 6
    assert not stack.redis.exists(mem.key("written_late"))
    assert read_memory(stack.redis, stack.keys, mem.agent_id).hash == digest


def test_a_memory_written_at_every_try_is_refused_and_left_as_it_was(
    stack: amber.Stack, mem: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore refused at every try changes nothing and says why; no older tier is
    restored instead (the memory is another writer's, not corrupt)."""
    analysis, _ = _setup(stack, mem)
    mem.set("after_checkpoint", "kept while the restore is refused")
    now = read_memory(stack.redis, stack.keys, mem.agent_id)
    from amber.memory import apply

    # as if another writer wrote between every read of the index and the script
    monkeypatch.setattr(apply, "read_held", lambda *a: Held((), now.seq - 1, now.epoch))
    with pytest.raises(MemoryContended, match="written to while it was being restored"):
        apply.apply_memory(stack.redis, stack.keys, mem.agent_id, {}, 0, 60_000)
    with pytest.raises(MemoryContended):
        stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")
    after = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert after.hash == now.hash and after.seq == now.seq and after.epoch == now.epoch


def test_a_value_that_does_not_decode_is_found_before_it_is_chosen() -> None:
    loaded = loaded_canon("postgresql_checkpoint", {"k": ("string", {"b64": "!!"}, -1)}, 0,
                          codec.combine(0), 1, None)  # fmt: skip
    verifier = ConsistencyVerifier(None, None)  # type: ignore[arg-type]
    verifier.check_snapshot("a", loaded)  # the hash alone: as a restore checks it
    with pytest.raises(codec.CodecError, match="base64"):
        verifier.check_snapshot("a", loaded, decode=True)
