"""Writes Redis acknowledged and then lost, as when a failover promotes a replica that had
not received them, cost at most the step in flight and never a silent wrong result.

The replica is stood in for by the agent's own keys as Redis held them one step earlier
(``DUMP`` then ``RESTORE``): the last step's writes and its save's copies are gone, and
the memory's sequence runs on from where the replica was, so the next writes are given
the very sequences of the lost ones, under the same epoch. The next save must see that
and refuse (``MemoryLost``); recovery must rebuild the newest checkpoint's memory from
PostgreSQL, not keep the replica's as if it were current.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import amber
from amber import MemoryLost
from amber.agents import BaseAgent
from amber.examples import ANALYSTS, MarketDataClient

from .test_redis_loss import _reference, _results

STEPS = tuple(f"s{i}" for i in range(6))


class Keeper(BaseAgent):
    """Each step writes one key of its own."""

    agent_type = "keeper"
    version = "1.0"
    subtasks = STEPS

    def run_subtask(self, name: str) -> Any:
        self.l1_cache.set(name, f"v:{name}")
        return {"done": name}


def _keys(stack: amber.Stack, agent_id: str) -> list[bytes]:
    return list(stack.redis.scan_iter(match=f"{stack.keys.prefix}:*{{{agent_id}}}*"))


def _as_it_was(stack: amber.Stack, agent_id: str) -> dict[bytes, tuple[bytes, int]]:
    return {k: (stack.redis.dump(k), stack.redis.pttl(k)) for k in _keys(stack, agent_id)}


def _promote(stack: amber.Stack, agent_id: str, replica: dict[bytes, tuple[bytes, int]]) -> None:
    """The agent's keys become what ``replica`` held: everything since is lost."""
    for key in _keys(stack, agent_id):
        stack.redis.delete(key)
    for key, (raw, ttl) in replica.items():
        stack.redis.restore(key, max(ttl, 0), raw)


def _step(stack: amber.Stack, agent: Keeper, name: str) -> None:
    agent.complete(name, agent.run_subtask(name))
    stack.checkpointer.save_checkpoint(agent, name)


def test_writes_a_failover_lost_are_caught_at_the_next_save(stack: amber.Stack) -> None:
    agent = Keeper(str(uuid.uuid4()), "AAPL", stack.memory(f"keeper-{uuid.uuid4().hex[:8]}"))
    for name in STEPS[:3]:
        _step(stack, agent, name)
    replica = _as_it_was(stack, agent.agent_id)
    _step(stack, agent, STEPS[3])  # acknowledged, and its checkpoint committed
    _promote(stack, agent.agent_id, replica)  # ... then lost with the primary
    agent.complete(STEPS[4], agent.run_subtask(STEPS[4]))  # given the lost write's sequence
    with pytest.raises(MemoryLost, match="acknowledged"):
        stack.checkpointer.save_checkpoint(agent, STEPS[4])
    newest = stack.checkpointer.restore_checkpoint(
        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
    ).checkpoint
    assert newest.completed_subtasks == list(STEPS[:4])  # nothing was saved over it
    # recovery without a mark to look for: the replica's memory is not taken as current
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, agent.agent_type)
    assert report.path == "postgresql_checkpoint" and report.verified and report.current
    mem = stack.memory(agent.agent_id)
    assert [mem.get(n) for n in STEPS] == [b"v:s0", b"v:s1", b"v:s2", b"v:s3", None, None]


def test_an_analysis_whose_agent_lost_acknowledged_writes_ends_as_an_uninterrupted_one(
    stack: amber.Stack,
) -> None:
    """Through the runtime: one agent's memory goes back one step between two steps; its
    next save refuses, the agent recovers its newest checkpoint and runs the step in
    flight again, and the results are those of an uninterrupted run."""
    assert stack.settings.durability == "checkpoint"
    reference = _reference(stack)
    market = MarketDataClient()
    co = stack.coordinator.using(market)
    aid = co.start_analysis("AAPL", ANALYSTS)
    seen: dict[str, int] = {}
    replica: dict[bytes, tuple[bytes, int]] = {}
    victim: list[str] = []

    def on_start(agent: BaseAgent, subtask: str) -> None:
        if not victim:
            victim.append(agent.agent_id)
        if agent.agent_id != victim[0]:
            return
        seen[subtask] = seen.get(subtask, 0) + 1
        started = len(seen)
        if started == 2 and seen[subtask] == 1:
            replica.update(_as_it_was(stack, agent.agent_id))
        elif started == 3 and seen[subtask] == 1:
            _promote(stack, agent.agent_id, replica)

    co.on_subtask_start = on_start
    co.run(aid)
    assert replica, "the agent ran fewer than three steps"
    assert stack.analyses.get(aid).status == "completed"
    assert _results(stack, aid) == reference
    assert max(seen.values()) == 2  # the step in flight ran again, no other
    assert sum(n - 1 for n in seen.values()) == 1


def test_a_save_refuses_again_until_the_memory_is_recovered(stack: amber.Stack) -> None:
    """What the sequences said stays with the memory object: a save tried again without
    a recovery refuses again, and after the recovery (another incarnation) saves go on."""
    agent = Keeper(str(uuid.uuid4()), "AAPL", stack.memory(f"keeper-{uuid.uuid4().hex[:8]}"))
    for name in STEPS[:2]:
        _step(stack, agent, name)
    replica = _as_it_was(stack, agent.agent_id)
    _step(stack, agent, STEPS[2])
    _promote(stack, agent.agent_id, replica)
    agent.complete(STEPS[3], agent.run_subtask(STEPS[3]))
    with pytest.raises(MemoryLost, match="acknowledged"):
        stack.checkpointer.save_checkpoint(agent, STEPS[3])
    with pytest.raises(MemoryLost):  # marked lost: taken by no one until recovered
        stack.checkpointer.save_checkpoint(agent, STEPS[3])
    # L1's index gone too: the secondary the failover took back is not restored as newest
    stack.redis.delete(stack.keys.l1_index(agent.agent_id))
    report = stack.recovery.recover_agent_state(agent.agent_id, agent.analysis_id, agent.agent_type)
    assert report.path == "postgresql_checkpoint" and report.current, report
    agent.l1_cache.guard(report.epoch)
    agent.run_subtask(STEPS[3])  # the step in flight, again (its completion is noted)
    cp = stack.checkpointer.save_checkpoint(agent, STEPS[3])
    assert cp.completed_subtasks == list(STEPS[:4])
    mem = stack.memory(agent.agent_id)
    assert [mem.get(n) for n in STEPS[:4]] == [b"v:s0", b"v:s1", b"v:s2", b"v:s3"]


def test_no_loss_is_reported_where_none_happened(stack: amber.Stack) -> None:
    """Sequences that run on, however the memory was snapshotted or written in between,
    are no loss: a snapshot stored between a write and the save, a second memory object
    writing to the same agent, a deferred batch too big to keep (sent the ordinary way)."""
    from amber.memory import known

    agent = Keeper(str(uuid.uuid4()), "AAPL", stack.memory(f"keeper-{uuid.uuid4().hex[:8]}"))
    _step(stack, agent, STEPS[0])
    agent.l1_cache.set("extra", "1")
    stack.snapshotter.store(stack.snapshotter.take(agent.agent_id, full=True))
    _step(stack, agent, STEPS[1])
    other = stack.memory(agent.agent_id)
    other.set("from another object", "2")
    _step(stack, agent, STEPS[2])
    big = b"x" * (known.MAX_BYTES + 1)
    with agent.l1_cache.batch(defer=True) as b:
        b.set("big", big)
    stack.checkpointer.save_checkpoint(agent, None)
    stack.checkpointer.save_checkpoint(agent, None)
    _step(stack, agent, STEPS[3])
    assert stack.memory(agent.agent_id).get("big") == big
