"""Every example in docs/wal.md runs: python blocks in order, then each ``$ amber`` line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amber.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "wal.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert len(blocks("python")) >= 4
    for code in blocks("python"):
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})


def test_console_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for code in blocks("python")[:1]:  # the quick start makes agent-state/
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
    commands = [line[2:] for b in blocks("console") for line in b.splitlines()]
    assert commands
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "amber"
        result = CliRunner().invoke(app, argv[1:])
        assert result.exit_code == 0, (command, result.output)
