"""Every ```python block in README.md and docs/*.md runs, against the suite's servers."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from .conftest import Engines

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)

examples = [
    pytest.param(code, id=f"{doc.name}-{i}")
    for doc in DOCS
    for i, code in enumerate(BLOCK.findall(doc.read_text()))
]


@pytest.mark.parametrize("code", examples)
def test_doc_example_runs(
    code: str, engines: Engines, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # a real module, so classes defined in an example resolve their annotations (LangGraph
    # reads a state's TypedDict hints, dataclasses read theirs) through sys.modules
    module = types.ModuleType("__doc_example__")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, "<doc>", "exec"), module.__dict__)


SHELL = re.compile(r"```sh\n(.*?)```", re.S)


def test_an_extra_is_installable_from_pypi_and_from_a_clone() -> None:
    """Wherever the docs say ``pip install 'amber[X]'`` they also give the command that
    works in a clone, ``pip install -e '.[X]'``."""
    for doc in DOCS:
        text = doc.read_text()
        for extra in re.findall(r"pip install 'amber\[(\w+)\]'", text):
            assert f"pip install -e '.[{extra}]'" in text, (doc.name, extra)


def test_a_shell_example_stops_every_process_it_starts() -> None:
    """A ``&`` job started in a shell example is killed by the example's end (a reader
    who pastes it is not left with a worker running)."""
    for doc in DOCS:
        for block in SHELL.findall(doc.read_text()):
            lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
            jobs = [i for i, line in enumerate(lines, 1) if line.endswith("&")]
            killed = {int(n) for line in lines for n in re.findall(r"\bkill\b.*?%(\d+)", line)}
            assert set(range(1, len(jobs) + 1)) <= killed, (doc.name, block)
