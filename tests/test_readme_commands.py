"""Every ``amber ...`` command in README.md runs: the commands table (each form with its
optional parts left out, then with them all) and the shell example, on the suite's
servers, with ids of things the test makes. Each exits 0; ``amber worker`` and ``amber
serve`` run until SIGTERM (the worker then exits 0; the server ends by the signal, as
uvicorn does). Every command of the CLI is in the table."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import amber
from amber.cli import app
from amber.examples import ANALYSTS
from amber.persistence import PersistenceManager

from .conftest import Engines

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
TEST_APP = "tests.runtime.cliapp:app"
LONG_RUNNING = {"worker", "serve"}
"""Commands that run until signalled: started, then stopped with SIGTERM."""


def table_forms() -> list[str]:
    """The command forms in the first column of the README's command table."""
    section = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    forms = []
    for row in section.splitlines():
        if row.startswith("| `amber"):
            first = row.split(" | ", 1)[0]
            forms += re.findall(r"`(amber [^`]+)`", first)
    return forms


def shell_lines() -> list[str]:
    """``amber`` command lines of the README's ``sh`` blocks, as written (``&`` kept)."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            inner = re.fullmatch(r"\w+=\$\((amber .*)\)", line)
            if inner:
                lines.append(inner.group(1))
            elif line.startswith("amber "):
                lines.append(line)
    return lines


def expansions(form: str) -> list[str]:
    """The form without its optional ``[...]`` parts, then with all of them."""
    bare = re.sub(r"\s*\[[^\[\]]*\]", "", form)
    full = re.sub(r"\[([^\[\]]*)\]", r"\1", form)
    return [bare] if bare == full else [bare, full]


def command_paths() -> set[str]:
    """Every command of the CLI, as ``analyses show``."""
    root = typer.main.get_command(app)
    paths: set[str] = set()

    def walk(command: object, prefix: str) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, f"{prefix} {name}".strip())
        elif prefix:
            paths.add(prefix)

    walk(root, "")
    return paths


def path_of(argv: list[str]) -> str:
    """The command path an argv names (``amber analyses show ID`` → ``analyses show``)."""
    paths = command_paths()
    for n in (2, 1):
        if " ".join(argv[1 : 1 + n]) in paths:
            return " ".join(argv[1 : 1 + n])
    raise AssertionError(f"{' '.join(argv)}: no such command")


def test_the_table_names_every_command_and_only_commands() -> None:
    forms = table_forms()
    named = {path_of(shlex.split(re.sub(r"[\[\]]", "", f))) for f in forms}
    assert named == command_paths()
    prose = re.findall(r"`(amber [a-z][a-z -]*)`", README)  # `amber serve` in a sentence
    for mention in prose:
        path_of(mention.split())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Ids:
    """Fresh, realistic values for the placeholders, made as each command needs them."""

    def __init__(self, stack: amber.Stack, engines: Engines, tmp: Path) -> None:
        self.stack, self.engines, self.tmp = stack, engines, tmp
        self.paused: str | None = None
        self.failed: str | None = None
        self.agent: str | None = None
        self.wal: Path | None = None
        self.session: str | None = None

    def submit(self, definition: str, doc: dict[str, object]) -> str:
        from tests.runtime import cliapp

        return cliapp.app.submit(self.stack, definition, doc)

    def value(self, placeholder: str, path: str) -> str:
        """What ``placeholder`` stands for in command ``path``."""
        fixed = {
            "MODULE:APP": TEST_APP,
            "DEFINITION": "cli_summary",
            "JSON": '{"text": "one two"}',
            "T": "MSFT",
            "N": "2",
            "R": "readme",
            "S": "completed",
            "STATUS": "pending",
            "PREFIX": "readme",
            "FILE": str(self.result_file()),
        }
        if placeholder in fixed:
            return fixed[placeholder]
        made: dict[str, Callable[[], str]] = {
            "ID": lambda: self.analysis(path),
            "STEP_ID": self.step,
            "REVIEW_ID": self.review,
            "CHECKPOINT_ID": self.checkpoint,
            "AGENT": self.agent_with_snapshot,
            "DIR": lambda: str(self.wal_dir()),
            "SESSION_ID": self.session_id,
        }
        return made[placeholder]()

    def analysis(self, path: str) -> str:
        if path == "pause":
            self.paused = self.submit("cli_summary", {"text": "to pause"})
            return self.paused
        if path == "resume":
            assert self.paused, "the README pauses an analysis before it resumes one"
            return self.paused
        if path == "analyses retry":
            if self.failed is None:
                broken = self.tmp / "broken"
                broken.touch()
                self.failed = self.submit("cli_flaky", {"broken": str(broken)})
                from tests.runtime import cliapp

                cliapp.app.run(self.stack, self.failed)
                assert self.stack.analyses.get(self.failed).status == "failed"
            return self.failed
        return self.submit("cli_summary", {"text": "to show"})

    def step(self) -> str:
        # the payment was made before the crash that left its step in doubt: a worker of
        # the app that reruns it later (in this test or another) finds the marker and
        # lives, instead of dying as a payment's first call does
        marker = self.tmp / "paid"
        marker.write_text("paid 1\n")
        aid = self.submit("cli_payment", {"marker": str(marker), "amount": 1})
        return self.stack.intents.begin(aid, "payer-1", "cli_payer", "pay", "send").step_id

    def review(self) -> str:
        aid = self.submit("cli_publish", {"text": "draft"})
        opened = self.stack.reviews.open(
            aid, "publisher-1", "cli_publisher", "ok", "publish", {"draft": "x"}, None, "approve"
        )
        return opened.review_id

    def checkpoint(self) -> str:
        aid = self.stack.coordinator.start_analysis("AAPL", ANALYSTS, preserve=True)
        self.stack.coordinator.run(aid)
        return str(self.stack.checkpointer.summaries(aid, limit=1)[0]["checkpoint_id"])

    def agent_with_snapshot(self) -> str:
        if self.agent is None:
            self.agent = f"readme_{uuid.uuid4().hex[:8]}"
            memory = self.stack.memory(self.agent)
            memory.set("notes", "kept")
            memory.rpush("seen", "a", "b")
            self.stack.snapshotter.snapshot_on_checkpoint(self.agent)
        return self.agent

    def wal_dir(self) -> Path:
        if self.wal is None:
            from amber.wal import StateStore

            self.wal = self.tmp / "store"
            store = StateStore(self.wal)
            store.log("memory_add", {"content": 1})
            store.checkpoint()
            store.close()
        return self.wal

    def session_id(self) -> str:
        if self.session is None:
            self.session = f"readme_{uuid.uuid4().hex[:8]}"

            async def save() -> None:
                async with PersistenceManager(
                    self.engines.redis_url, prefix=self.engines.prefix
                ) as pm:
                    await pm.save_session(
                        {"session_id": self.session, "goal": "readme", "status": "planning"}
                    )

            asyncio.run(save())
        return self.session

    def result_file(self) -> Path:
        path = self.tmp / "result.json"
        path.write_text('{"receipt": "readme"}')
        return path


def concrete(form: str, ids: Ids) -> list[str]:
    """``form`` with each placeholder replaced by a fresh value."""
    argv = shlex.split(form)
    path = path_of(argv)
    out = []
    for word in argv:
        if re.fullmatch(r"[A-Z][A-Z_]*(:[A-Z]+)?", word):
            out.append(ids.value(word, path))
        else:
            out.append(word)
    if path == "down":  # a data directory of its own: the suite's servers keep running
        out[1:1] = ["--data-dir", str(ids.tmp / "down")]
    if path == "serve":
        out += ["--port", str(free_port())]
    return out


def amber_process(argv: list[str]) -> list[str]:
    return [sys.executable, "-c", "from amber.cli import main; main()", *argv[1:]]


def process_env(extra_path: Path | None = None) -> dict[str, str]:
    parts = [str(ROOT / "src"), str(ROOT)] + ([str(extra_path)] if extra_path else [])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(parts), AMBER_APP=TEST_APP)


@contextlib.contextmanager
def running(argv: list[str], cwd: Path, extra_path: Path | None = None) -> Iterator[None]:
    """Start a long-running command, wait until it says it is up, SIGTERM it at the end."""
    proc = subprocess.Popen(
        amber_process(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=process_env(extra_path),
        cwd=cwd,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(("worker ", "amber serve:")), (argv, first, proc.stderr.read())
        if "--port" in argv:  # up once it accepts connections (its SIGTERM handler is set)
            port = int(argv[argv.index("--port") + 1])
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                assert time.monotonic() < deadline and proc.poll() is None, "serve never listened"
                time.sleep(0.1)
        else:
            time.sleep(0.3)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    # a worker hands its work back and exits 0; uvicorn shuts the server down and then
    # ends the process by the signal it caught, as its own CLI does
    done = (0, -signal.SIGTERM) if "serve" in argv else (0,)
    assert proc.returncode in done, (argv, proc.returncode, err)


def run(argv: list[str], path: str, cwd: Path) -> str:
    if path in LONG_RUNNING:
        with running(argv, cwd):
            return ""
    result = CliRunner().invoke(app, argv[1:], env={"AMBER_APP": TEST_APP})
    assert result.exit_code == 0, (argv, result.output)
    return result.output


def test_every_command_of_the_table_runs(
    stack: amber.Stack, engines: Engines, tmp_path: Path
) -> None:
    ids = Ids(stack, engines, tmp_path)
    ran = []
    for form in table_forms():
        for expanded in expansions(form):
            path = path_of(shlex.split(expanded))
            run(concrete(expanded, ids), path, tmp_path)
            ran.append(path)
    assert set(ran) == command_paths()


def test_the_shell_example_runs(
    stack: amber.Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (module,) = re.findall(r"```python\n(# report\.py\n.*?)```", README, re.S)
    (tmp_path / "report.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    lines = shell_lines()
    assert any(line.startswith("amber submit") for line in lines)
    variables: dict[str, str] = {}
    for line in lines:
        background = line.endswith("&")
        argv = shlex.split(line.rstrip("& ").replace("$ID", variables.get("ID", "$ID")))
        if background:
            assert path_of(argv) in LONG_RUNNING, line
            with running(argv, tmp_path, extra_path=tmp_path):
                pass
            continue
        out = run(argv, path_of(argv), tmp_path)
        if path_of(argv) == "submit":
            variables["ID"] = out.strip()
            uuid.UUID(variables["ID"])
