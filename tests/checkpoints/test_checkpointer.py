"""AgentCheckpointer: exact round trips, tiered restore, migrations, failure records."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import amber
from amber import (
    CheckpointCorrupt,
    CheckpointNotFound,
    Durability,
    MigrationError,
    VersionTooNew,
    codec,
)
from amber.agents import BaseAgent
from amber.checkpoints import CheckpointMigrations


class Probe(BaseAgent):
    """A small agent for tests: four subtasks, each writing to L1."""

    agent_type = "probe_agent"
    version = "1.0"
    subtasks = ("one", "two", "three", "four")

    def run_subtask(self, name: str) -> Any:
        self.l1_cache.rpush("log", name)
        return {"done": name, "nested": {"values": [1.5, 2, None, "é"]}}


@pytest.fixture
def agent(stack: amber.Stack, uid: Callable[[str], str]) -> Probe:
    a = Probe(
        str(uuid.uuid4()),
        "AAPL",
        stack.memory(uid("probe")),
        config={"model": "m1", "limits": [1, 2]},
    )
    a.complete("one", a.run_subtask("one"))
    a.retry_count = 2
    return a


def test_save_restore_round_trips_every_field(stack: amber.Stack, agent: Probe) -> None:
    saved = stack.checkpointer.save_checkpoint(agent, "one")
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "redis_backup" and restored.ms >= 0
    assert restored.checkpoint == saved
    cp = restored.checkpoint
    assert cp.completed_subtasks == ["one"] and cp.pending_subtasks == ["two", "three", "four"]
    assert cp.progress_pct == 25.0 and cp.current_subtask == "two" and cp.retry_count == 2
    assert cp.agent_config == {"model": "m1", "limits": [1, 2]}
    assert cp.interim_results["one"]["nested"]["values"] == [1.5, 2, None, "é"]
    assert cp.l1_snapshot_hash == stack.snapshotter.take(agent.agent_id).hash
    from_pg = stack.checkpointer.get(saved.checkpoint_id)
    assert from_pg == saved


def test_pg_fallback_when_backup_missing(stack: amber.Stack, agent: Probe) -> None:
    saved = stack.checkpointer.save_checkpoint(agent, "one")
    stack.redis.delete(stack.keys.checkpoint(agent.agent_id))
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "postgresql" and restored.checkpoint == saved
    assert restored.skipped == ["redis_backup: missing"]


@pytest.mark.parametrize("current", [True, False], ids=["backup current", "backup older"])
def test_a_long_state_is_left_to_a_current_backup_and_read_again_when_it_is_older(
    stack: amber.Stack, agent: Probe, current: bool
) -> None:
    """The backup's read goes out before PostgreSQL is asked, and PostgreSQL leaves out a
    state longer than ``BACKUP_SERVES`` for it: a current backup serves it, an older one
    is skipped and the row read again, whole."""
    from amber.checkpoints.reads import BACKUP_SERVES

    def noise() -> str:  # incompressible: stored longer than BACKUP_SERVES
        return base64.b64encode(os.urandom(2 * BACKUP_SERVES)).decode()

    agent.complete("two", {"noise": noise()})
    stack.checkpointer.save_checkpoint(agent, "two")
    older = stack.redis.get(stack.keys.checkpoint(agent.agent_id))
    agent.complete("three", {"noise": noise()})
    newest = stack.checkpointer.save_checkpoint(agent, "three")
    if not current:  # as after a crash between the PostgreSQL commit and the Redis write
        stack.redis.set(stack.keys.checkpoint(agent.agent_id), older)  # type: ignore[arg-type]
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.checkpoint == newest
    if current:
        assert restored.source == "redis_backup" and restored.skipped == []
    else:
        assert restored.source == "postgresql"
        assert f"redis_backup: at sequence {newest.seq - 1}, PostgreSQL at {newest.seq}" in (
            restored.skipped
        )
    with stack.pg.connection() as conn:
        stored = conn.execute(
            "SELECT octet_length(state) FROM agent_checkpoints WHERE checkpoint_id = %s",
            (newest.checkpoint_id,),
        ).fetchone()
    assert stored is not None and stored[0] > BACKUP_SERVES


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "wrong_sum"])
def test_corrupt_backup_is_reported_and_skipped(
    stack: amber.Stack, agent: Probe, damage: str
) -> None:
    saved = stack.checkpointer.save_checkpoint(agent, "one")
    key = stack.keys.checkpoint(agent.agent_id)
    blob = bytearray(stack.redis.get(key))  # type: ignore[arg-type]
    if damage == "flip":
        blob[-10] ^= 0x01
    elif damage == "truncate":
        blob = blob[:40]
    elif damage == "garbage":
        blob = bytearray(b"x" * 64 + b"not zstd")
    else:
        blob[0:1] = b"0" if blob[0:1] != b"0" else b"1"
    stack.redis.set(key, bytes(blob))
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.source == "postgresql" and restored.checkpoint == saved
    assert restored.skipped and restored.skipped[0].startswith("redis_backup:")


def test_corrupt_pg_row_falls_back_to_the_previous_one(stack: amber.Stack, agent: Probe) -> None:
    first = stack.checkpointer.save_checkpoint(agent, "one")
    agent.complete("two", agent.run_subtask("two"))
    second = stack.checkpointer.save_checkpoint(agent, "two")
    stack.redis.delete(stack.keys.checkpoint(agent.agent_id))
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE agent_checkpoints SET state = %s WHERE checkpoint_id = %s",
            (codec.pack(b'{"tampered": true}'), second.checkpoint_id),
        )
    restored = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    )
    assert restored.checkpoint == first
    assert any(second.checkpoint_id in s for s in restored.skipped)
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE agent_checkpoints SET state = %s WHERE analysis_id = %s",
            (b"junk", agent.analysis_id),
        )
    with pytest.raises(CheckpointCorrupt):
        stack.checkpointer.restore_checkpoint(
            agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
        )


def test_nothing_saved_is_not_found(stack: amber.Stack) -> None:
    with pytest.raises(CheckpointNotFound):
        stack.checkpointer.restore_checkpoint(uuid.uuid4(), "probe_agent")


def test_failure_checkpoint_records_reason_details_retries(
    stack: amber.Stack, agent: Probe
) -> None:
    stack.checkpointer.save_checkpoint(
        agent, None, failure_reason="quota_exhausted", error_details={"provider": "koyfin"}
    )
    cp = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    ).checkpoint
    assert cp.failure_reason == "quota_exhausted" and cp.error_details == {"provider": "koyfin"}
    assert cp.retry_count == 2
    rows = stack.checkpointer.summaries(agent.analysis_id)
    assert rows[0]["failure_reason"] == "quota_exhausted" and rows[0]["retry_count"] == 2


def test_non_json_interim_result_is_a_clear_error(stack: amber.Stack, agent: Probe) -> None:
    agent.interim_results["bad"] = {1, 2}
    with pytest.raises(amber.InvalidValue, match="interim_results"):
        stack.checkpointer.save_checkpoint(agent, "one")


def test_durability_mode_decides_where_l1_goes(stack: amber.Stack, agent: Probe) -> None:
    assert stack.settings.durability == Durability.CHECKPOINT  # the default
    dual = stack.checkpointer.save_checkpoint(agent, "one")
    hybrid = stack.checkpointer.save_checkpoint(agent, "one", dual_write=False)
    with stack.pg.connection() as conn:
        rows = dict(
            conn.execute(
                "SELECT checkpoint_id::text, l1_snapshot IS NOT NULL FROM agent_checkpoints"
                " WHERE analysis_id = %s",
                (agent.analysis_id,),
            ).fetchall()
        )
    assert rows == {hybrid.checkpoint_id: False, dual.checkpoint_id: True}


def test_version_migration_v1_0_to_v1_1(stack: amber.Stack, agent: Probe) -> None:
    registry = CheckpointMigrations()

    @registry("probe_agent", "1.0", "1.1")
    def migrate_v1_0_to_v1_1(checkpoint: dict[str, Any]) -> dict[str, Any]:
        if "subtask_progress" not in checkpoint:
            checkpoint["subtask_progress"] = {t: 1.0 for t in checkpoint["completed_subtasks"]}
        return checkpoint

    stack.checkpointer.save_checkpoint(agent, "one")
    old, stack.checkpointer.migrations = stack.checkpointer.migrations, registry
    try:
        restored = stack.checkpointer.restore_checkpoint(agent.analysis_id, "probe_agent", "1.1")
    finally:
        stack.checkpointer.migrations = old
    assert restored.migrated_from == ["1.0"]
    assert restored.checkpoint.agent_version == "1.1"
    assert restored.checkpoint.extra["subtask_progress"] == {"one": 1.0}


def test_newer_record_is_refused_and_gaps_are_named(stack: amber.Stack, agent: Probe) -> None:
    stack.checkpointer.save_checkpoint(agent, "one")
    with pytest.raises(VersionTooNew, match=r"1\.0"):
        stack.checkpointer.restore_checkpoint(agent.analysis_id, "probe_agent", "0.9")
    with pytest.raises(MigrationError, match="no migration registered"):
        stack.checkpointer.restore_checkpoint(agent.analysis_id, "probe_agent", "2.0")


def test_a_row_of_a_few_kilobytes_stays_whole_in_its_page(stack: amber.Stack, agent: Probe) -> None:
    # incompressible values: the row's memory takes about 3 KB however it is packed
    agent.l1_cache.set("noise", base64.b64encode(os.urandom(2000)))
    with stack.pg.connection() as conn:
        toast = conn.execute(
            "SELECT reltoastrelid::regclass::text FROM pg_class"
            " WHERE oid = 'agent_checkpoints'::regclass"
        ).fetchone()
        assert toast is not None
        count = f"SELECT count(*) FROM {toast[0]}"
        try:
            before = conn.execute(count).fetchone()
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("reading a TOAST table takes a superuser")
        stack.checkpointer.save_checkpoint(agent, "one")
        size = conn.execute(
            "SELECT pg_column_size(c.*) FROM agent_checkpoints c WHERE analysis_id = %s",
            (agent.analysis_id,),
        ).fetchone()
        after = conn.execute(count).fetchone()
    assert size is not None and 2500 < size[0] < 4000  # over the default's 2 KB
    assert after == before  # no part of it went to the TOAST table
