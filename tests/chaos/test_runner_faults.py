"""Real runner processes killed, paused and resumed at the bad moments.

Each test runs an analysis in a child process and breaks it the way production
does: SIGKILL right after the PostgreSQL commit (before the Redis copies), SIGKILL
in the middle of a subtask, a pause from another process while a subtask runs.
Then a fresh process continues, and no subtask whose checkpoint had committed
runs again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import amber
from amber.examples import ANALYSTS, MarketDataClient
from amber.pause import PauseManager
from tests.chaos.agents import GateAgent, ledger
from tests.chaos.helpers import SRC
from tests.conftest import Engines

pytestmark = pytest.mark.chaos

ROOT = str(Path(SRC).parent)

RUN = """
import os, signal, sys
import amber
from amber.checkpoints.store import AgentCheckpointer
import amber.examples  # registers the example analysts
import tests.chaos.agents  # registers GateAgent

aid, durability, kill_at_commit, at = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if kill_at_commit:
    commits = [0]
    original = getattr(AgentCheckpointer, at)

    def cache(self, *args, **kwargs):
        commits[0] += 1
        if commits[0] == kill_at_commit:  # at _cache: PostgreSQL has committed, Redis has not
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, *args, **kwargs)

    setattr(AgentCheckpointer, at, cache)
with amber.connect(durability=durability) as stack:
    results = stack.coordinator.run(aid)
    print(" ".join(f"{t}={r.status}" for t, r in results.items()), flush=True)
"""


def _child(
    aid: str, durability: str = "hybrid", kill_at_commit: int = 0, at: str = "_cache"
) -> subprocess.Popen[str]:
    """A runner of ``aid``, SIGKILLed at its ``kill_at_commit``-th call of the
    checkpointer's method ``at`` (0: never)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, ROOT]))
    return subprocess.Popen(
        [sys.executable, "-c", RUN, aid, durability, str(kill_at_commit), at],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _committed(stack: amber.Stack, aid: str) -> set[tuple[str, str]]:
    """(agent_type, subtask) of every subtask some committed checkpoint lists as done."""
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT agent_type, completed_subtasks FROM agent_checkpoints WHERE analysis_id = %s",
            (aid,),
        ).fetchall()
    return {(t, s) for t, done in rows for s in done}


def _settled(stack: amber.Stack, aid: str) -> set[tuple[str, str]]:
    """``_committed`` once the dead child's in-flight inserts have finished: PostgreSQL
    completes a statement it received whole even after its client died."""
    seen, stable = _committed(stack, aid), 0
    while stable < 5:
        time.sleep(0.1)
        now = _committed(stack, aid)
        stable = stable + 1 if now == seen else 0
        seen = now
    return seen


def _head_seq(stack: amber.Stack, aid: str, agent_type: str) -> int:
    with stack.pg.connection() as conn:
        row = conn.execute(
            "SELECT max(seq) FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s",
            (aid, agent_type),
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


@pytest.mark.parametrize("kill_at_commit", [1, 4, 9])
def test_kill_between_the_postgresql_commit_and_the_redis_write(
    stack: amber.Stack, kill_at_commit: int
) -> None:
    market = MarketDataClient()
    co = stack.coordinator.using(market)
    aid = co.start_analysis("AAPL", ANALYSTS, preserve=True)
    child = _child(aid, kill_at_commit=kill_at_commit)
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    committed = _settled(stack, aid)
    # the kill came after this commit (agents run at once: another may have committed too)
    assert kill_at_commit <= len(committed) <= kill_at_commit + 2
    starts: list[tuple[str, str]] = []
    co.on_subtask_start = lambda agent, name: starts.append((agent.agent_type, name))
    report = PauseManager(stack.analyses, co).resume(aid)  # the dead runner's work, taken over
    assert report.resumed and report.taken_over
    assert all(r.status == "completed" for r in report.results.values())
    assert not committed & set(starts), "a subtask whose checkpoint had committed ran again"
    assert len(starts) + len(committed) == 13
    for cls in ANALYSTS:
        _assert_one_chain(stack, aid, cls.agent_type)


@pytest.mark.parametrize("durability", ["hybrid", "checkpoint"])
def test_kill_as_the_redis_copies_are_built_never_rolls_back(
    stack: amber.Stack, durability: str
) -> None:
    """Killed as a save builds its Redis copies: in ``checkpoint`` mode the insert went out
    first (its row holds the memory); in ``hybrid`` the row does not, so the copies go out
    first and nothing is committed yet. Either way the memory of every committed
    checkpoint can be rebuilt: the resume rolls nothing back and repeats nothing."""
    market = MarketDataClient()
    co = stack.coordinator.using(market)
    aid = co.start_analysis("AAPL", ANALYSTS, preserve=True)
    child = _child(aid, durability, kill_at_commit=5, at="_cache_commands")
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    committed = _settled(stack, aid)
    starts: list[tuple[str, str]] = []
    co.on_subtask_start = lambda agent, name: starts.append((agent.agent_type, name))
    report = PauseManager(stack.analyses, co).resume(aid)
    assert all(r.status == "completed" for r in report.results.values())
    rolled = [e["detail"] for e in stack.analyses.timeline(aid) if e["kind"] == "rolled_back"]
    assert not rolled
    assert not committed & set(starts), "a subtask whose checkpoint had committed ran again"
    assert len(starts) + len(committed) == 13


def _seqs(stack: amber.Stack, aid: str, agent_type: str) -> list[int]:
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT seq FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s",
            (aid, agent_type),
        ).fetchall()
    return [int(r[0]) for r in rows]


def _assert_one_chain(stack: amber.Stack, aid: str, agent_type: str) -> None:
    """The agent's checkpoints are 1, 2, ... with no gap and no number twice."""
    head = _head_seq(stack, aid, agent_type)
    assert sorted(_seqs(stack, aid, agent_type)) == list(range(1, head + 1))


def _dead_at_the_gate(
    stack: amber.Stack, tmp_path: Path, durability: str
) -> tuple[str, Path, Path]:
    """An analysis whose runner was SIGKILLed inside its "gate" subtask."""
    aid, gate, book = _gated(stack, tmp_path)
    child = _child(aid, durability)
    _wait_for(book, "gate", child)
    child.kill()
    child.communicate(timeout=30)
    return aid, gate, book


def _gated(stack: amber.Stack, tmp_path: Path) -> tuple[str, Path, Path]:
    gate, book = tmp_path / "gate", tmp_path / "ledger"
    aid = stack.coordinator.start_analysis(
        "AAPL", [GateAgent], {"gate": str(gate), "ledger": str(book)}, preserve=True
    )
    return aid, gate, book


def _wait_for(book: Path, subtask: str, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not any(line[:2] == ["start", subtask] for line in ledger(book)):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never reached the subtask"
        time.sleep(0.02)


def _starts(book: Path) -> list[str]:
    return [line[1] for line in ledger(book) if line[0] == "start"]


def test_a_sigkilled_runner_is_taken_over_by_amber_resume(
    stack: amber.Stack, engines: Engines, tmp_path: Path
) -> None:
    aid, gate, book = _dead_at_the_gate(stack, tmp_path, "hybrid")
    assert stack.analyses.get(aid).status == "running"
    deadline = time.monotonic() + 10  # PostgreSQL notices the dead connection a moment later
    while stack.analyses.has_runner(aid):
        assert time.monotonic() < deadline, "the dead runner's lease never lapsed"
        time.sleep(0.05)
    gate.touch()
    cli = subprocess.run(
        [
            sys.executable,
            "-c",
            "from amber.cli import main; main()",
            "resume",
            aid,
            "--app",
            "tests.chaos.agents:app",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, ROOT])),
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert "took over" in cli.stdout
    assert stack.analyses.get(aid).status == "completed"
    assert _starts(book) == ["one", "gate", "gate", "three"]  # only the one in flight again


@pytest.mark.parametrize("durability", ["hybrid", "wal"])
def test_a_pause_from_another_process_never_overwrites_the_running_subtask(
    stack: amber.Stack, tmp_path: Path, durability: str
) -> None:
    aid, gate, book = _gated(stack, tmp_path)
    child = _child(aid, durability)
    _wait_for(book, "gate", child)
    with amber.connect(durability=durability) as other:  # wal: the child holds the log
        report = other.pause_manager.pause(aid, "awaiting_review", "reviewer")
    assert report.pending and stack.analyses.get(aid).status == "paused"
    gate.touch()  # the subtask ends; its runner checkpoints it, then freezes
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert "gate_agent=paused" in out
    pause = stack.analyses.open_pause(aid)
    assert pause is not None and pause["frozen_at"] is not None
    assert pause["reason"] == "awaiting_review"
    assert ("gate_agent", "gate") in _committed(stack, aid)
    with amber.connect(durability=durability) as fresh:
        resumed = fresh.pause_manager.resume(aid)
    assert resumed.results["gate_agent"].status == "completed"
    assert _starts(book) == ["one", "gate", "three"]  # nothing ran twice
    _assert_one_chain(stack, aid, "gate_agent")


@pytest.mark.parametrize("durability", ["hybrid", "wal"])
def test_a_pause_after_the_runner_died_is_done_by_the_pausing_process(
    stack: amber.Stack, tmp_path: Path, durability: str
) -> None:
    aid, gate, book = _dead_at_the_gate(stack, tmp_path, durability)
    with amber.connect(durability=durability) as other:
        report = other.pause_manager.pause(aid, "quota_exhausted", "ops")
        assert not report.pending and len(report.agents) == 1
        assert report.agents[0]["completed"] == 1
    gate.touch()
    with amber.connect(durability=durability) as fresh:
        resumed = fresh.pause_manager.resume(aid)
    assert resumed.results["gate_agent"].status == "completed"
    assert _starts(book) == ["one", "gate", "gate", "three"]


def test_a_pause_after_redis_lost_the_memory_recovers_before_it_snapshots(
    stack: amber.Stack,
) -> None:
    from amber.demo import expire_l1

    market = MarketDataClient(quotas={"koyfin": 15})
    co = stack.coordinator.using(market)
    pm = PauseManager(stack.analyses, co)
    aid = co.start_analysis("AAPL", ANALYSTS, preserve=True)
    co.run(aid)
    assert stack.analyses.get(aid).status == "paused"
    kept = _snapshot_keys(stack, aid)
    assert kept["financial_analyst"] and kept["strategy_analyst"]  # valuation has not started
    pm.resume(aid, run=False)  # running, nobody runs it yet
    agents = [a["agent_id"] for a in stack.analyses.get(aid).agents]
    expire_l1(stack, agents)  # Redis lost the working memory
    for agent_id in agents:  # and the secondary with it
        stack.redis.delete(stack.keys.l1_snapshot(agent_id), stack.keys.l1_snapshot_meta(agent_id))
    report = pm.pause(aid, "awaiting_review")
    assert not report.pending
    assert _snapshot_keys(stack, aid) == kept  # not an empty memory over the good snapshot
    market.set_quota("koyfin", None)
    resumed = pm.resume(aid)
    assert all(r.status == "completed" for r in resumed.results.values())
    assert market.duplicate_calls == 0 and co.reexecuted == 0


def _snapshot_keys(stack: amber.Stack, aid: str) -> dict[str, int]:
    """Keys in each agent's newest snapshot in PostgreSQL."""
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT DISTINCT ON (agent_type) agent_type, l1_snapshot_keys FROM agent_checkpoints"
            " WHERE analysis_id = %s AND l1_snapshot IS NOT NULL ORDER BY agent_type, seq DESC",
            (aid,),
        ).fetchall()
    return {str(t): int(n or 0) for t, n in rows}


def _ghost(stack: amber.Stack, status: str) -> str:
    import uuid

    aid = str(uuid.uuid4())
    ghost: dict[str, Any] = {
        "agent_type": "ghost_agent",
        "agent_id": "ghost_agent_0001",
        "version": "1.0",
        "config": {},
    }
    stack.analyses.create(aid, "AAPL", [ghost])
    if status != "running":
        stack.analyses.transition(aid, status, ("running",))
    return aid


def test_a_failed_resume_leaves_the_analysis_paused_with_the_reason(stack: amber.Stack) -> None:
    aid = _ghost(stack, "paused")
    stack.analyses.record_pause(aid, "awaiting_review", "test")
    for _ in range(2):  # and it can be tried again
        with pytest.raises(amber.UnknownAgent, match="ghost_agent"):
            stack.pause_manager.resume(aid)
        assert stack.analyses.get(aid).status == "paused"
        assert not stack.analyses.has_runner(aid)
    pauses = stack.analyses.pauses(aid)
    assert "ghost_agent" in (pauses[-1]["error"] or "")


def test_a_pause_needs_no_agent_code_and_a_resume_without_it_changes_nothing(
    stack: amber.Stack,
) -> None:
    aid = _ghost(stack, "running")
    report = stack.pause_manager.pause(aid, "awaiting_review")  # frozen from stored state
    assert not report.pending and stack.analyses.get(aid).status == "paused"
    pause = stack.analyses.open_pause(aid)
    assert pause is not None and pause["frozen_at"] is not None
    with pytest.raises(amber.UnknownAgent):
        stack.pause_manager.resume(aid)
    assert stack.analyses.get(aid).status == "paused"
