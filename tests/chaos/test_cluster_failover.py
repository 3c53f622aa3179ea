"""Kill a Redis Cluster primary while agents write memory and checkpoint; nothing is lost.

The cluster is this test's own (``tests.cluster.LocalCluster``, loopback ports);
PostgreSQL is the suite's. The workload runs through the failover without a
restart: no completed subtask runs twice, every checkpoint PostgreSQL
acknowledged is there, and every memory verifies or is recovered.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import amber
from amber import AmberError, MemoryLost
from amber.agents import BaseAgent
from amber.engines.retry import Policy

from ..cluster import LocalCluster
from ..conftest import Engines

SUBTASKS = tuple(f"s{i:02d}" for i in range(40))


class Worker(BaseAgent):
    """Each subtask writes one memory key (SET: the same value if sent twice). A run that
    failed before its work was done (its write refused mid-failover) runs again: only a
    run that completed is counted, and none may complete twice."""

    agent_type = "failover_agent"
    version = "1.0"
    subtasks = SUBTASKS
    runs: Counter[tuple[str, str]]

    def run_subtask(self, name: str) -> Any:
        self.l1_cache.set(name, f"{self.agent_id}:{name}")
        self.runs[(self.agent_id, name)] += 1  # counted once the work is done
        return {"done": name}


def _run(agent: Worker, name: str, failures: list[float]) -> None:
    while True:
        try:
            agent.complete(name, agent.run_subtask(name))
            return
        except AmberError:
            failures.append(time.time())
            time.sleep(0.1)


def _work(
    stack: amber.Stack,
    agent: Worker,
    acked: list[int],
    failures: list[float],
    again: Counter[tuple[str, str]],
) -> None:
    for name in SUBTASKS:
        if name not in agent.completed_subtasks:
            _run(agent, name, failures)
        while True:  # the subtask is done: only its checkpoint is retried, never the work
            try:
                acked.append(stack.checkpointer.save_checkpoint(agent, name).seq)
                break
            except MemoryLost:
                # writes the dead primary acknowledged never reached the promoted replica:
                # the memory is rebuilt from the newest checkpoint, which the step in
                # flight is not in, so that step runs again (the most a Redis loss costs)
                failures.append(time.time())
                stack.recovery.recover_agent_state(
                    agent.agent_id, agent.analysis_id, agent.agent_type
                )
                agent.l1_cache.guard(agent.l1_cache.current_epoch())
                again[(agent.agent_id, name)] += 1
                _run(agent, name, failures)
            except AmberError:
                failures.append(time.time())
                if agent.checkpoint_seq and acked and agent.checkpoint_seq > acked[-1]:
                    acked.append(agent.checkpoint_seq)  # committed; only its copies failed
                    break
                time.sleep(0.1)
        time.sleep(0.02)


@dataclass
class Workload:
    """Six agents checkpointing through ``stack`` in threads, and what they saw."""

    stack: amber.Stack
    agents: list[Worker]
    runs: Counter[tuple[str, str]]
    again: Counter[tuple[str, str]]
    """Steps in flight run again after their save found the memory had lost writes."""
    acked: dict[str, list[int]]
    failures: list[float]
    threads: list[threading.Thread]

    @classmethod
    def start(cls, stack: amber.Stack, tag: str) -> Workload:
        """Start the agents; they run for a few seconds."""
        runs: Counter[tuple[str, str]] = Counter()
        agents = []
        for i in range(6):
            a = Worker(str(uuid.uuid4()), "AAPL", stack.memory(f"{tag}-{i}-{uuid.uuid4().hex[:6]}"))
            a.runs = runs
            agents.append(a)
        acked: dict[str, list[int]] = {a.agent_id: [] for a in agents}
        failures: list[float] = []
        again: Counter[tuple[str, str]] = Counter()
        threads = [
            threading.Thread(target=_work, args=(stack, a, acked[a.agent_id], failures, again))
            for a in agents
        ]
        for t in threads:
            t.start()
        return cls(stack, agents, runs, again, acked, failures, threads)

    def join(self, killed_at: float) -> tuple[int, float]:
        """Wait for the agents; (commands retried since the kill, window of retries and
        failures in seconds)."""
        for t in self.threads:
            t.join(240)
        assert not any(t.is_alive() for t in self.threads)
        policy: Policy = self.stack.redis.policy  # type: ignore[attr-defined]
        retried = [r for r in policy.retried if r[0] >= killed_at - 1]
        times = [r[0] for r in retried] + self.failures
        return len(retried), (max(times) - min(times)) if times else 0.0

    def check(self) -> None:
        """No subtask ran twice but a step in flight when the memory lost writes, no
        acknowledged checkpoint was lost, every memory whole."""
        stack = self.stack
        twice = {k: n for k, n in self.runs.items() if n != 1 + self.again[k]}
        assert not twice, f"a completed subtask ran twice: {twice}"
        assert len(self.runs) == len(self.agents) * len(SUBTASKS)
        for a in self.agents:
            stored = stack.checkpointer.restore_checkpoint(
                a.analysis_id, a.agent_type, agent_id=a.agent_id
            ).checkpoint
            assert stored.seq >= max(self.acked[a.agent_id]), "an acknowledged checkpoint was lost"
            assert stored.completed_subtasks == list(SUBTASKS)
            report = stack.recovery.recover_agent_state(a.agent_id, a.analysis_id, a.agent_type)
            assert report is not None
            for name in SUBTASKS:
                assert a.l1_cache.get(name) == f"{a.agent_id}:{name}".encode()


def test_primary_killed_mid_workload_loses_and_repeats_nothing(engines: Engines) -> None:
    with LocalCluster() as cluster:
        stack = amber.connect(
            cluster.url,
            engines.database_url,
            prefix=f"{engines.prefix}-fo",
            redis_retry_seconds=30,
            durability="checkpoint",
        )
        with stack:
            work = Workload.start(stack, "fo")
            time.sleep(1.0)
            victim = stack.redis.keyslot(stack.keys.l1_index(work.agents[0].agent_id))  # type: ignore[attr-defined]
            node = stack.redis.nodes_manager.get_node_from_slot(victim)  # type: ignore[attr-defined]
            killed_at = time.time()
            cluster.kill(node.port)
            retried, window = work.join(killed_at)
            cluster.wait_ok()
            print(
                f"\nfailover: killed {node.name} at +1.0s; {retried} command retries,"
                f" {len(work.failures)} failed operations seen by the workload,"
                f" {sum(work.again.values())} steps in flight run again,"
                f" window {window:.2f}s"
            )
            work.check()
