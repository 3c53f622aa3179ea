"""Own TTLs are intended expiries; values that cannot be stored are refused before logging."""

from __future__ import annotations

import math
import time
import uuid

import pytest

import amber
from amber import InvalidValue, StoreUnavailable
from amber.memory import AgentMemory, read_memory


def test_an_own_ttl_running_out_is_not_lost_memory(stack: amber.Stack, mem: AgentMemory) -> None:
    mem.set("tmp_cache", "x")
    stack.snapshotter.snapshot_on_checkpoint(mem.agent_id)
    mem.set("later", "kept")
    assert mem.expire("tmp_cache", 1)
    time.sleep(1.1)
    report = stack.recovery.recover_agent_state(mem.agent_id, uuid.uuid4(), "strategy")
    assert report.path == "l1_existing"
    assert mem.get("later") == b"kept" and mem.get("tmp_cache") is None
    assert "tmp_cache" not in mem.keys_list()


def test_expire_zero_deletes_and_missing_is_false(mem: AgentMemory) -> None:
    assert mem.expire("blob", 0) and not mem.exists("blob")
    assert not mem.expire("nothing", 10)
    assert mem.expire("current_subtask", 100) and 0 < mem.ttl("current_subtask") <= 100


def test_nan_none_and_bools_are_refused_before_anything_happens(mem: AgentMemory) -> None:
    seq = mem.sequence()
    for bad in (
        lambda: mem.zadd("z", {"m": math.nan}),
        lambda: mem.set("n", None),  # type: ignore[arg-type]
        lambda: mem.rpush("l", True),
    ):
        with pytest.raises(InvalidValue):
            bad()
    assert mem.sequence() == seq and not mem.exists("z")


def test_a_refused_command_is_store_unavailable(stack: amber.Stack, mem: AgentMemory) -> None:
    stack.redis.delete(mem.key("big"))
    stack.redis.hset(mem.key("big"), "f", "v")  # raw, outside amber
    mem.hset("h", mapping={"f": "v"})
    with pytest.raises(StoreUnavailable, match="refused"):
        mem._apply("HSET", "h", ["odd-number-of-args"], None)
    assert read_memory(stack.redis, stack.keys, mem.agent_id).memory["h"].value == {b"f": b"v"}


def test_cli_verify_checks_the_snapshot_itself(stack: amber.Stack, mem: AgentMemory) -> None:
    from typer.testing import CliRunner

    from amber.cli import app

    runner = CliRunner()
    stack.snapshotter.snapshot_on_checkpoint(mem.agent_id)
    result = runner.invoke(app, ["memory", "verify", mem.agent_id])
    assert result.exit_code == 0 and "ok" in result.output
    stack.redis.set(stack.keys.l1_snapshot(mem.agent_id), b"garbage")
    result = runner.invoke(app, ["memory", "verify", mem.agent_id])
    assert result.exit_code == 1 and "error" in result.output
    result = runner.invoke(app, ["wal", "verify", "/etc"])
    assert result.exit_code == 1 and "no WAL segments" in result.output
