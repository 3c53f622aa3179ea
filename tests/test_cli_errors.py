"""The command line answers bad input with one ``error: ...`` line, never a traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from typer.testing import CliRunner, Result

import amber
from amber.cli import app
from amber.cli.app import console
from amber.examples import ANALYSTS
from amber.persistence import PersistenceManager

from .conftest import Engines

runner = CliRunner()


def one_error_line(result: Result) -> str:
    """The single ``error:`` line of a command that failed cleanly with exit code 1."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_unknown_status_is_named(engines: Engines) -> None:
    line = one_error_line(runner.invoke(app, ["analyses", "list", "--status", "a\x00b"]))
    assert "status must be one of running, paused" in line
    assert runner.invoke(app, ["analyses", "list", "--status", "paused"]).exit_code == 0


def test_bad_pause_arguments_leave_the_analysis_running(stack: amber.Stack) -> None:
    analysis_id = stack.coordinator.start_analysis("AAPL", ANALYSTS)
    for args, field in [
        (["--reason", "quota\x00"], "reason"),
        (["--reason", "\udcff"], "reason"),
        (["--reason", "r" * 1001], "reason"),
        (["--reason", ""], "reason"),
        (["--reason", "quota", "--by", "\x00"], "by"),
    ]:
        line = one_error_line(runner.invoke(app, ["pause", analysis_id, *args]))
        assert f"field='{field}'" in line and len(line) < 600
    assert stack.analyses.get(analysis_id).status == "running"
    line = one_error_line(runner.invoke(app, ["resume", "not-a-uuid"]))
    assert "analysis_id is not a UUID" in line


def test_limits_out_of_range_are_usage_errors(engines: Engines) -> None:
    for command in (["analyses", "list"], ["checkpoints", "list"], ["sessions", "list"]):
        result = runner.invoke(app, [*command, "--limit", str(2**63)])
        assert result.exit_code == 2 and "Traceback" not in result.output
    result = runner.invoke(app, ["wal", "compact", ".", "--retention-hours", "-1"])
    assert result.exit_code == 2


def test_file_system_refusals_are_one_line(engines: Engines) -> None:
    line = one_error_line(runner.invoke(app, ["--data-dir", "d" * 5000, "down"]))
    assert "File name too long" in line and len(line) < 1100
    line = one_error_line(runner.invoke(app, ["wal", "inspect", "w" * 5000]))
    assert "File name too long" in line


def test_data_is_printed_as_it_is(engines: Engines, uid: Callable[[str], str]) -> None:
    prefix = f"{engines.prefix}-{uid('cli')}"
    goal = "[bold]not bold[/bold] [/x] :smile:"

    async def fill() -> None:
        async with PersistenceManager(engines.redis_url, prefix=prefix) as pm:
            await pm.save_session({"session_id": "s1", "goal": goal, "status": "planning"})

    asyncio.run(fill())
    result = runner.invoke(app, ["--prefix", prefix, "sessions", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert goal in result.output


def test_text_the_terminal_cannot_encode_is_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    console.print("key a\udcffb")  # a non-UTF-8 argument arrives as a lone surrogate
    assert "key a\\udcffb" in capsys.readouterr().out
    console.print("still works")
    assert "still works" in capsys.readouterr().out
