"""What a new user's first ``make demo`` installs, and that it installs quietly."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_license_is_an_spdx_expression() -> None:
    """``license = { text = ... }`` makes setuptools print a deprecation warning on every
    install; PEP 639's SPDX string does not."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    build = project["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(7[7-9]|[89]\d)", r) for r in build), build


def test_make_demo_installs_amber_alone_and_make_test_the_extras() -> None:
    """The demo does not wait for playwright, mypy, ruff and LangGraph to install."""
    makefile = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo: (\S+)", makefile, re.M)
    assert demo is not None and demo.group(1) == "$(CORE)"
    core = re.search(r"^\$\(CORE\):.*\n\t(.*)\n", makefile, re.M)
    assert core is not None and core.group(1).endswith("pip install --quiet -e .")
    test = re.search(r"^test: (\S+)", makefile, re.M)
    assert test is not None and test.group(1) == "$(STAMP)"
