"""The application registry: names, not import paths; clear errors; code changes refused."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import amber
from amber.agents import BaseAgent
from amber.runtime import load_app

AppMaker = Callable[[], amber.App]
Namer = Callable[[str], str]


def test_registration_errors_are_clear(new_app: AppMaker, name: Namer) -> None:
    app = new_app()

    @app.agent(name=name("one"))
    def one(ctx: Any) -> int:
        return 1

    with pytest.raises(amber.RegistrationError, match="registered already"):
        app.agent(name=app.agent_name(one))(lambda ctx: 2)
    with pytest.raises(amber.RegistrationError):
        app.agent(42)
    with pytest.raises(amber.RegistrationError):
        app.agent(name="bad:name")(lambda ctx: 0)
    with pytest.raises(amber.UnknownAgent):
        app.analysis("missing", ["nobody"])
    with pytest.raises(amber.RegistrationError, match="at least one"):
        app.analysis("empty", [])
    app.analysis("solo", [one])
    with pytest.raises(amber.RegistrationError, match="defined already"):
        app.analysis("solo", [one])
    with pytest.raises(amber.UnknownAgent, match="solo"):
        app.resolve("solo")


def test_submit_refuses_bad_input_and_stores_nothing(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app = new_app()

    @app.agent(name=name("echo"))
    def echo(ctx: Any) -> Any:
        return ctx.input

    before = len(stack.analyses.list(limit=100_000))
    with pytest.raises(amber.UnknownAgent, match="not defined"):
        app.submit(stack, "nope")
    with pytest.raises(amber.InvalidValue, match="JSON object"):
        app.submit(stack, [echo], ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(amber.InvalidValue, match="not JSON"):
        app.submit(stack, [echo], {"x": object()})
    with pytest.raises(amber.InvalidIdentifier, match="stock_ticker"):
        app.submit(stack, [echo], ticker="")
    assert len(stack.analyses.list(limit=100_000)) == before
    aid = app.submit(stack, [echo], {"x": 1}, ticker="AAPL")
    (result,) = app.run(stack, aid).values()
    assert result.status == "completed"


def test_an_unknown_agent_leaves_the_analysis_as_it_was(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, other = new_app(), new_app()

    @app.agent(name=name("known"))
    def known(ctx: Any) -> int:
        return 7

    aid = app.submit(stack, [known])
    with pytest.raises(amber.UnknownAgent, match="not registered"):
        other.run(stack, aid)
    record = stack.analyses.get(aid)
    assert record.status == "running" and not stack.analyses.has_runner(aid)
    (result,) = app.run(stack, aid).values()  # the right app runs it
    assert result.status == "completed"


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))


def test_load_app_names_what_is_wrong(module_dir: Path) -> None:
    (module_dir / "amber_app_ok.py").write_text("import amber\napp = amber.App('ok')\nx = 3\n")
    (module_dir / "amber_app_broken.py").write_text("raise RuntimeError('boom at import')\n")
    assert load_app("amber_app_ok:app").name == "ok"
    cases = {
        "": "no app given",
        "amber_app_ok": "module:attr",
        "amber_app_ok:": "module:attr",
        "no_such_module_xyz:app": "could not be imported",
        "amber_app_broken:app": "boom at import",
        "amber_app_ok:missing": "has no attribute",
        "amber_app_ok:x": "not an amber.App",
    }
    for target, message in cases.items():
        with pytest.raises(amber.AppNotFound, match=message):
            load_app(target)


class Writer(BaseAgent):
    """Two subtasks; a later version of the code (below) adds a third."""

    agent_type = "fingerprint_writer"
    version = "1.0"
    subtasks: ClassVar[tuple[str, ...]] = ("outline", "draft")
    stop_after: ClassVar[set[str]] = set()

    def run_subtask(self, name: str) -> Any:
        if name in self.stop_after:
            raise amber.QuotaExceeded("out of quota", provider="llm")
        return name.upper()


def test_a_subtask_added_without_a_version_bump_is_refused_not_skipped(
    stack: amber.Stack, new_app: AppMaker
) -> None:
    app = new_app()
    app.agent(Writer)
    Writer.stop_after = {"draft"}
    aid = app.submit(stack, [Writer])
    (result,) = app.run(stack, aid).values()
    assert result.status == "quota_exhausted"

    class Writer2(BaseAgent):
        agent_type = "fingerprint_writer"
        version = "1.0"
        subtasks = ("outline", "draft", "review")

        def run_subtask(self, name: str) -> Any:
            return name.upper()

    changed = new_app()
    changed.agent(Writer2)
    with pytest.raises(amber.CodeChanged, match="added review"):
        changed.resume(stack, aid)
    assert stack.analyses.get(aid).status == "paused"  # nothing changed: still resumable
    Writer.stop_after = set()
    report = app.resume(stack, aid)  # the code it started with runs it
    assert report.results["fingerprint_writer"].status == "completed"


def test_a_new_version_with_a_registered_migration_resumes(
    stack: amber.Stack, new_app: AppMaker
) -> None:
    app = new_app()

    class Old(BaseAgent):
        agent_type = "fingerprint_migrated"
        version = "1.0"
        subtasks = ("a", "b")

        def run_subtask(self, name: str) -> Any:
            if name == "b":
                raise amber.QuotaExceeded("later")
            return name

    app.agent(Old)
    aid = app.submit(stack, [Old])
    app.run(stack, aid)

    class New(BaseAgent):
        agent_type = "fingerprint_migrated"
        version = "2.0"
        subtasks = ("a", "b", "c")

        def run_subtask(self, name: str) -> Any:
            return name

    newer = new_app()
    newer.agent(New)
    with pytest.raises(amber.MigrationError, match="no migration"):
        newer.resume(stack, aid)

    @amber.checkpoint_migration("fingerprint_migrated", "1.0", "2.0")
    def add_c(cp: dict[str, Any]) -> dict[str, Any]:
        cp["pending_subtasks"] = [*cp["pending_subtasks"], "c"]
        return cp

    report = newer.resume(stack, aid)
    assert report.results["fingerprint_migrated"].completed == ["a", "b", "c"]
