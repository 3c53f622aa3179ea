"""``amber sessions list|show`` on real Redis, and the module's reviews in ``amber reviews``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from amber.cli import app
from amber.persistence import PersistenceManager

from ..conftest import Engines

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


@pytest.fixture
def filled(engines: Engines, prefix: str) -> str:
    async def fill() -> None:
        async with PersistenceManager(engines.redis_url, prefix=prefix) as pm:
            await pm.save_session(
                {
                    "session_id": "sess_a",
                    "goal": "Research trending AI topics",
                    "status": "planning",
                    "task_queue": ["t1", "t2"],
                }
            )
            await pm.save_session({"session_id": "sess_b", "goal": "Draft", "status": "executing"})
            t1 = {
                "id": "t1",
                "type": "mcp_call",
                "mcp_tool": "twitter_trends",
                "parameters": {"location": "US"},
                "timeout": 30,
            }
            await pm.save_task(t1, "sess_a")
            await pm.save_task({"id": "t2", "type": "mcp_call"}, "sess_a")
            expires = datetime.now(UTC) + timedelta(hours=1)
            await pm.save_review(
                {"review_id": "rev_1", "task_id": "t1", "confidence": 0.75, "expires_at": expires}
            )

    asyncio.run(fill())
    return prefix


def test_sessions_list(filled: str) -> None:
    result = runner.invoke(app, ["--prefix", filled, "sessions", "list"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "sess_a" in result.output and "sess_b" in result.output
    assert "Research trending AI topics" in result.output
    assert result.output.index("sess_b") < result.output.index("sess_a")  # latest first
    assert "2 session(s)" in result.output


def test_sessions_show(filled: str) -> None:
    result = runner.invoke(app, ["--prefix", filled, "sessions", "show", "sess_a"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert '"version": 1' in result.output and '"status": "planning"' in result.output
    assert "twitter_trends" in result.output and "30s" in result.output
    assert result.output.index("t1") < result.output.rindex("t2")
    assert "2 queued task(s)" in result.output


def test_sessions_show_missing_is_one_line_error(filled: str) -> None:
    result = runner.invoke(app, ["--prefix", filled, "sessions", "show", "ghost"], env=WIDE)
    assert result.exit_code == 1
    assert "no such session" in result.output and "ghost" in result.output
    assert "Traceback" not in result.output


def test_sessions_show_bad_id_is_one_line_error(filled: str) -> None:
    result = runner.invoke(app, ["--prefix", filled, "sessions", "show", "a*"], env=WIDE)
    assert result.exit_code == 1
    assert "session_id contains '*'" in result.output


def test_reviews_list_shows_the_modules_reviews_and_approves_them_once(filled: str) -> None:
    listing = ["reviews", "list", "--scope", filled]
    result = runner.invoke(app, listing, env=WIDE)
    assert result.exit_code == 0, result.output
    assert f"{filled}:rev_1" in result.output and "task t1 (confidence 0.75)" in result.output
    assert "1 pending review(s)" in result.output
    everything = runner.invoke(app, ["reviews", "list", "--limit", "10000"], env=WIDE)
    assert f"{filled}:rev_1" in everything.output  # the one queue, every scope and analysis
    approve = ["reviews", "approve", f"{filled}:rev_1", "--by", "carol"]
    result = runner.invoke(app, approve, env=WIDE)
    assert result.exit_code == 0, result.output
    assert f"review {filled}:rev_1 of task t1 approved" in result.output
    again = runner.invoke(app, approve, env=WIDE)
    assert again.exit_code == 1 and "already approved" in again.output
    assert "0 pending review(s)" in runner.invoke(app, listing, env=WIDE).output
    decided = runner.invoke(app, [*listing, "--status", "approved"], env=WIDE)
    assert "1 approved review(s)" in decided.output


def test_unreachable_redis_is_one_line_error(filled: str) -> None:
    args = ["--redis-url", "redis://127.0.0.1:1/0", "--prefix", filled, "reviews", "list"]
    result = runner.invoke(app, args, env={**WIDE, "AMBER_CONNECT_TIMEOUT": "1"})
    assert result.exit_code == 1
    assert "Redis did not answer" in result.output
