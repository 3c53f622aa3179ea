"""Quiet saves: a hybrid checkpoint of an empty, unchanged working memory that is small
leaves Redis alone, and restore still returns the newest checkpoint (from PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import amber
from amber import Durability, codec
from amber.agents import BaseAgent
from amber.checkpoints.store import QUIET_MAX_BYTES

from ..conftest import Engines


class Still(BaseAgent):
    """Records results and never touches its working memory."""

    agent_type = "still_agent"
    version = "1.0"
    subtasks = ("one", "two", "three", "four")
    payload = 10

    def run_subtask(self, name: str) -> Any:
        return {"done": name, "pad": "x" * self.payload}


def _agent(stack: amber.Stack, uid: Callable[[str], str], payload: int = 10) -> Still:
    """A new agent, recovered as a run recovers it (fresh: no checkpoint yet)."""
    agent = Still(str(uuid.uuid4()), "AAPL", stack.memory(uid("still")))
    agent.payload = payload
    report = stack.recovery.recover_agent_state(
        agent.agent_id, agent.analysis_id, agent.agent_type, fresh=True
    )
    agent.l1_cache.guard(report.epoch)
    return agent


def _save(stack: amber.Stack, agent: BaseAgent, name: str) -> None:
    agent.complete(name, agent.run_subtask(name))
    stack.checkpointer.save_checkpoint(agent, name)


def _backup_seq(stack: amber.Stack, agent: BaseAgent) -> int | None:
    blob = stack.redis.get(stack.keys.checkpoint(agent.agent_id))
    return None if blob is None else codec.sealed_seq(blob)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def hybrid(engines: Engines) -> Iterator[amber.Stack]:
    """A stack in the opt-in ``hybrid`` mode, on the suite's servers."""
    with amber.connect(
        engines.redis_url, engines.database_url, prefix=engines.prefix, durability="hybrid"
    ) as s:
        assert s.settings.durability == Durability.HYBRID
        yield s


def test_saves_of_an_empty_unchanged_memory_leave_redis_alone(
    hybrid: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(hybrid, uid)  # its recovery read the empty memory: no save reads it
    for name in ("one", "two", "three"):
        _save(hybrid, agent, name)
        assert _backup_seq(hybrid, agent) is None  # nothing written to Redis
    assert hybrid.snapshotter.latest_meta(agent.agent_id) is None
    restored = hybrid.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "postgresql" and restored.checkpoint.seq == 3
    assert restored.checkpoint.completed_subtasks == ["one", "two", "three"]
    assert restored.skipped == ["redis_backup: missing"]


def test_an_older_backup_left_by_a_quiet_save_is_not_used(
    hybrid: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(hybrid, uid)
    agent.l1_cache.set("draft", "scratch")
    _save(hybrid, agent, "one")
    agent.l1_cache.delete("draft")  # a change: the copies are written again
    _save(hybrid, agent, "two")
    assert _backup_seq(hybrid, agent) == 2
    _save(hybrid, agent, "three")
    _save(hybrid, agent, "four")
    assert _backup_seq(hybrid, agent) == 2
    restored = hybrid.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "postgresql" and restored.checkpoint.seq == 4
    assert "redis_backup: at sequence 2, PostgreSQL at 4" in restored.skipped


def test_a_memory_write_brings_the_copies_back(
    hybrid: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(hybrid, uid)
    _save(hybrid, agent, "one")
    _save(hybrid, agent, "two")
    assert _backup_seq(hybrid, agent) is None
    agent.l1_cache.set("note", "kept")
    _save(hybrid, agent, "three")
    assert _backup_seq(hybrid, agent) == 3
    meta = hybrid.snapshotter.latest_meta(agent.agent_id)
    assert meta is not None and meta.key_count == 1
    restored = hybrid.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "redis_backup" and restored.checkpoint.seq == 3


def test_a_large_checkpoint_keeps_its_redis_backup(
    hybrid: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(hybrid, uid, payload=QUIET_MAX_BYTES)
    _save(hybrid, agent, "one")
    _save(hybrid, agent, "two")
    assert _backup_seq(hybrid, agent) == 2


@pytest.fixture
def dual(engines: Any) -> Iterator[amber.Stack]:
    with amber.connect(
        engines.redis_url, engines.database_url, prefix=engines.prefix, durability="checkpoint"
    ) as s:
        yield s


def test_the_checkpoint_mode_writes_every_checkpoint_to_redis(
    dual: amber.Stack, uid: Callable[[str], str]
) -> None:
    agent = _agent(dual, uid)
    for name in ("one", "two", "three"):
        _save(dual, agent, name)
        assert _backup_seq(dual, agent) == agent.checkpoint_seq


def test_a_memoryless_run_resumes_from_postgresql_after_a_kill(
    hybrid: amber.Stack, uid: Callable[[str], str]
) -> None:
    """What a runner killed after quiet saves leaves: a stale backup and no secondary
    change; a new process restores the newest checkpoint and an empty memory."""
    agent = _agent(hybrid, uid)
    for name in ("one", "two", "three"):
        _save(hybrid, agent, name)
    hybrid.snapshotter.forget(agent.agent_id)  # as a new process: nothing remembered
    fresh = Still(agent.analysis_id, "AAPL", hybrid.memory(agent.agent_id))
    report = hybrid.recovery.recover_agent_state(
        agent.agent_id, agent.analysis_id, agent.agent_type
    )
    restored = hybrid.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    fresh.apply_checkpoint(restored.checkpoint, restored.head_seq)
    assert fresh.completed_subtasks == ["one", "two", "three"]
    assert fresh.next_subtask() == "four"
    assert report.keys == 0 and hybrid.snapshotter.take(agent.agent_id).memory == {}
