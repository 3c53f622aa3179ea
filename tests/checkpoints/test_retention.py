"""Retention removes exactly what the policy says, and nothing else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

import amber
from amber.agents import BaseAgent
from amber.checkpoints.model import now
from amber.cli import app


class Two(BaseAgent):
    agent_type = "two_step_agent"
    subtasks = ("a", "b")

    def run_subtask(self, name: str) -> Any:
        self.l1_cache.set(name, name)
        if name == "b" and self.config.get("fail"):
            raise ValueError("b failed")
        return name


def _analysis(stack: amber.Stack, fail: bool) -> str:
    co = stack.coordinator.using()
    aid = co.start_analysis("AAPL", [Two], config={"fail": fail})
    co.run(aid)
    return aid


def _count(stack: amber.Stack, aid: str, table: str = "agent_checkpoints") -> int:
    with stack.pg.connection() as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {table} WHERE analysis_id = %s", (aid,)
        ).fetchone()
    return int(row[0])  # type: ignore[index]


def _age(stack: amber.Stack, aid: str, days: float) -> None:
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE analyses SET updated_at = %s WHERE analysis_id = %s",
            (now() - timedelta(days=days), aid),
        )


def test_success_deletes_checkpoints_and_backups(stack: amber.Stack) -> None:
    aid = _analysis(stack, fail=False)
    assert stack.analyses.get(aid).status == "completed"
    assert _count(stack, aid) == 0
    agent_id = stack.analyses.get(aid).agents[0]["agent_id"]
    assert stack.redis.exists(stack.keys.checkpoint(agent_id)) == 0


def test_failed_kept_30_days_then_deleted_unless_preserved(stack: amber.Stack) -> None:
    young, old, kept = (_analysis(stack, fail=True) for _ in range(3))
    _age(stack, young, 29)
    _age(stack, old, 31)
    _age(stack, kept, 31)
    stack.analyses.set_preserve(kept)
    before = {a: _count(stack, a) for a in (young, old, kept)}
    assert all(n >= 2 for n in before.values())  # 'a' done + failure checkpoint
    dry = stack.retention.gc(dry_run=True)
    assert dry.deleted.get(old) == before[old] and _count(stack, old) == before[old]
    report = stack.retention.gc()
    assert report.deleted.get(old) == before[old]
    assert young not in report.deleted and kept not in report.deleted
    assert _count(stack, old) == 0
    assert _count(stack, young) == before[young] and _count(stack, kept) == before[kept]


def test_pause_past_the_limit_expires_then_ages_like_a_failure(stack: amber.Stack) -> None:
    aid = _analysis(stack, fail=True)
    stack.analyses.transition(aid, "paused", ("failed",))
    n = _count(stack, aid)
    assert aid not in stack.retention.gc(at=now() + timedelta(days=13)).expired
    report = stack.retention.gc(at=now() + timedelta(days=15))
    assert aid in report.expired and aid not in report.deleted
    assert stack.analyses.get(aid).status == "expired" and _count(stack, aid) == n
    assert stack.retention.gc(at=now() + timedelta(days=31)).deleted.get(aid) == n


def test_archive_moves_rows(stack: amber.Stack) -> None:
    aid = _analysis(stack, fail=True)
    n = _count(stack, aid)
    assert stack.retention.purge(aid, archive=True) == n
    assert _count(stack, aid) == 0 and _count(stack, aid, "agent_checkpoints_archive") == n


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_cli_list_show_gc(stack: amber.Stack, runner: CliRunner) -> None:
    aid = _analysis(stack, fail=True)
    result = runner.invoke(app, ["checkpoints", "list", "--analysis", aid])
    assert result.exit_code == 0, result.output
    assert "two_step_agent" in result.output and "1 of 2" in result.output
    cid = stack.checkpointer.summaries(aid)[0]["checkpoint_id"]
    result = runner.invoke(app, ["checkpoints", "show", str(cid)])
    assert result.exit_code == 0 and '"failure_reason": "ValueError: b failed"' in result.output
    result = runner.invoke(app, ["checkpoints", "show", "not-a-uuid"])
    assert result.exit_code == 1 and "not a UUID" in result.output
    result = runner.invoke(app, ["gc", "--dry-run"])
    assert result.exit_code == 0 and "checkpoint(s)" in result.output
