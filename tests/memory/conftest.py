"""Fixtures for L1 tests: a populated agent memory and a checkpoint row to attach to."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import amber
from amber.agents import BaseAgent
from amber.memory import AgentMemory, read_memory, snapshot

BINARY = bytes(range(256))


def fill(mem: AgentMemory) -> None:
    """Every type, binary values, a big set and a zset with equal scores."""
    mem.set("current_subtask", "ma_review")
    mem.set("blob", BINARY)
    mem.rpush("aapl_historical_roi", 0.15, 0.18, 0.12)
    mem.hset("api_cache:koyfin_aapl_acquisitions", mapping={"deals": "3", b"\xff": b"\x00\x01"})
    mem.sadd("tickers", *[f"T{i}" for i in range(500)])
    mem.zadd("ranks", {f"m{i}": 1.0 for i in range(300)} | {"top": float("inf"), "neg": -2.5})


@pytest.fixture
def agent_id(uid: Callable[[str], str]) -> str:
    return uid("agent")


@pytest.fixture
def mem(stack: amber.Stack, agent_id: str) -> AgentMemory:
    m = stack.memory(agent_id)
    fill(m)
    return m


def insert_checkpoint(stack: amber.Stack, analysis_id: str, agent_type: str, agent_id: str) -> str:
    """A bare checkpoint row (what AgentCheckpointer writes), for snapshot tests."""
    cid = str(uuid.uuid4())
    with stack.pg.connection() as conn:
        conn.execute(
            "INSERT INTO agent_checkpoints (checkpoint_id, seq, stock_ticker, agent_type, agent_id,"
            " analysis_id, checkpoint_time, agent_version, state, state_sha256)"
            " SELECT %s, COALESCE(max(seq), 0) + 1, 'AAPL', %s, %s, %s, %s, '1.0', '', ''"
            " FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s",
            (cid, agent_type, agent_id, analysis_id, datetime.now(UTC), analysis_id, agent_type),
        )
    return cid


class Writer(BaseAgent):
    """An agent of many trivial subtasks, saved one at a time by :func:`save_step`."""

    agent_type = "known_writer"
    subtasks = tuple(f"s{i}" for i in range(40))

    def run_subtask(self, name: str) -> str:
        return name


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The agents whose changes a save read back from Redis, in order."""
    seen: list[str] = []
    real = snapshot.read_changes

    def counted(client: Any, keys: Any, base: Any, *rest: Any) -> Any:
        seen.append(base.agent_id)
        return real(client, keys, base, *rest)

    monkeypatch.setattr(snapshot, "read_changes", counted)
    yield seen


def save_step(stack: amber.Stack, agent: Writer) -> amber.Checkpoint:
    """Complete the agent's next subtask and checkpoint it."""
    name = agent.next_subtask()
    assert name is not None
    agent.complete(name, name)
    return stack.checkpointer.save_checkpoint(agent, name)


def exact(stack: amber.Stack, agent_id: str) -> None:
    """The snapshot the last save stored is the memory Redis holds, read whole."""
    stored = stack.snapshotter.stored(agent_id)
    whole = read_memory(stack.redis, stack.keys, agent_id)
    assert stored is not None
    assert stored.snap.hash == whole.hash and stored.snap.seq == whole.seq

    def values(memory: dict[str, Any]) -> dict[str, Any]:  # an own TTL runs down meanwhile
        return {n: (e.type, e.value, e.ttl_ms > 0) for n, e in memory.items()}

    assert values(stored.snap.memory) == values(whole.memory)
