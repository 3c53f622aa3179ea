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
