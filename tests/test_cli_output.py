"""How the command line reads: ids by unique prefix, ``--json`` everywhere, tables that
keep ids whole at 80 and 200 columns, ``amber status`` counts, progress only on a TTY."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner, Result

import amber
from amber.cli import app, output
from amber.cli.ids import uuid_prefix
from amber.errors import InvalidIdentifier
from amber.examples import ANALYSTS

from .conftest import Engines

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, columns: int = 200) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": str(columns)})


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@dataclass(frozen=True)
class World:
    """An analysis with a checkpoint, an in-doubt step and a pending review; a failed one."""

    analysis_id: str
    agent_id: str
    checkpoint_id: str
    step_id: str
    review_id: str
    failed_id: str


def _analysis_with(stack: amber.Stack, analysis_id: str) -> str:
    agents = [c.entry() for c in ANALYSTS]
    stack.analyses.create(analysis_id, "AAPL", agents, definition="cli_output")
    return analysis_id


@pytest.fixture(scope="module")
def world(stack: amber.Stack) -> World:
    aid = stack.coordinator.start_analysis("AAPL", ANALYSTS, preserve=True)
    stack.coordinator.run(aid)  # completed, its checkpoints kept
    record = stack.analyses.get(aid)
    agent = record.agents[0]
    cid = str(stack.checkpointer.summaries(aid, limit=1)[0]["checkpoint_id"])
    queued = _analysis_with(stack, str(uuid.uuid4()))  # running, no live run: in doubt
    intent = stack.intents.begin(queued, "a1", "payer", "pay", "send")
    review = stack.reviews.open(
        queued, "a1", "payer", "ok", "publish", {"draft": "x" * 300}, None, "approve"
    )
    failed = _analysis_with(stack, str(uuid.uuid4()))
    stack.analyses.transition(failed, "failed", ("running",))
    return World(aid, agent["agent_id"], cid, intent.step_id, review.review_id, failed)


# -- prefixes ------------------------------------------------------------------------------
def test_prefix_forms() -> None:
    assert uuid_prefix("ABCD", "analysis_id") == "abcd"
    assert uuid_prefix("0123456789ab", "analysis_id") == "01234567-89ab"
    assert uuid_prefix("01234567-89AB-c", "analysis_id") == "01234567-89ab-c"
    whole = str(uuid.uuid4())
    assert uuid_prefix(whole.replace("-", ""), "analysis_id") == whole
    for bad in ("abc", "", "wxyz", "0123456789abcdef0123456789abcdef0", "ab%d", "ab_d"):
        with pytest.raises(InvalidIdentifier, match="not a UUID or a prefix"):
            uuid_prefix(bad, "analysis_id")


def test_every_id_is_taken_by_a_unique_prefix(world: World, stack: amber.Stack) -> None:
    aid = world.analysis_id
    for given in (aid[:8], aid[:6].upper(), aid.replace("-", "")[:14], aid):
        assert json.loads(ok(cli("analyses", "show", given, "--json")))["analysis_id"] == aid
    shown = json.loads(ok(cli("checkpoints", "show", world.checkpoint_id[:10], "--json")))
    assert shown["checkpoint_id"] == world.checkpoint_id
    listed = json.loads(ok(cli("checkpoints", "list", "--analysis", aid[:9], "--json")))
    assert listed and {r["analysis_id"] for r in listed} == {aid}
    doubt = json.loads(ok(cli("steps", "in-doubt", "--json")))
    assert world.step_id in [i["step_id"] for i in doubt]
    pending = json.loads(ok(cli("reviews", "list", "--json")))
    assert world.review_id in [r["review_id"] for r in pending]
    memory = json.loads(ok(cli("memory", "show", world.agent_id[:-3], "--json")))
    assert memory["agent_id"] == world.agent_id


def test_a_prefix_resolves_for_decisions(stack: amber.Stack) -> None:
    aid = _analysis_with(stack, str(uuid.uuid4()))
    intent = stack.intents.begin(aid, "a1", "payer", "pay", "send")
    out = ok(cli("steps", "resolve", intent.step_id[:8], "--rerun"))
    assert f"analysis {aid} continues when it resumes" in out
    review = stack.reviews.open(aid, "a1", "payer", "ok", "publish", {}, None, "approve")
    assert f"review {review.review_id} (publish) approved" in ok(
        cli("reviews", "approve", review.review_id[:8])
    )


def test_an_ambiguous_prefix_names_its_candidates(stack: amber.Stack) -> None:
    base = uuid.uuid4().hex[:6]
    tail = str(uuid.uuid4())[8:]
    ids = [_analysis_with(stack, f"{base}{n:02x}{tail}") for n in range(2)]
    for args in (["analyses", "show", base], ["pause", base, "--reason", "r"]):
        line = error_line(cli(*args))
        assert f"analysis_id prefix '{base}' is ambiguous" in line
        assert all(i in line for i in ids), line
    line = error_line(cli("memory", "show", ANALYSTS[0].agent_type[:6]))
    assert "agent_id prefix" in line and "is ambiguous" in line


def test_a_prefix_with_no_match_is_not_found(engines: Engines) -> None:
    unused = "ffffffff-ffff-4fff"  # version-4 ids never start so
    for args, what in [
        (["analyses", "show", unused], "no analysis id starts with"),
        (["checkpoints", "show", unused], "no checkpoint id starts with"),
        (["reviews", "approve", unused], "no review id starts with"),
        (["steps", "resolve", unused, "--rerun"], "no step id starts with"),
        (["resume", unused], "no analysis id starts with"),
        (["memory", "show", f"nobody_{uuid.uuid4().hex}"], "no working memory"),
    ]:
        assert what in error_line(cli(*args)), args
    assert "is not a UUID or a prefix" in error_line(cli("analyses", "show", "abc"))


# -- --json --------------------------------------------------------------------------------
def json_commands(w: World, data: Path) -> list[list[str]]:
    return [
        ["analyses", "list"],
        ["analyses", "show", w.analysis_id],
        ["checkpoints", "list"],
        ["checkpoints", "show", w.checkpoint_id],
        ["steps", "in-doubt"],
        ["reviews", "list"],
        ["reviews", "list"],
        ["sessions", "list"],
        ["memory", "show", w.agent_id],
        ["status"],
        ["gc", "--dry-run"],
        ["wal", "inspect", str(data)],
        ["wal", "verify", str(data)],
        ["wal", "compact", str(data)],
    ]


def wal_dir(tmp_path: Path) -> Path:
    from amber.wal import StateStore

    clock = [1_000_000.0]  # long ago: compaction has checkpoints to remove
    store = StateStore(tmp_path / "store", segment_entries=4, clock=lambda: clock[0])
    for i in range(20):
        store.log("memory_add", {"content": i})
        if i % 5 == 4:
            store.checkpoint()
            clock[0] += 3600
    store.close()
    return tmp_path / "store"


def test_every_list_and_show_command_prints_json(world: World, tmp_path: Path) -> None:
    for args in json_commands(world, wal_dir(tmp_path)):
        out = ok(cli(*args, "--json"))
        doc = json.loads(out)
        _assert_sorted(doc)


def _assert_sorted(doc: Any) -> None:
    if isinstance(doc, dict):
        assert list(doc) == sorted(doc)
        for v in doc.values():
            _assert_sorted(v)
    elif isinstance(doc, list):
        for v in doc:
            _assert_sorted(v)


def test_status_is_an_overview(world: World) -> None:
    doc = json.loads(ok(cli("status", "--json")))
    assert doc["connected"] and doc["schema_version"] >= 1
    assert [e["engine"] for e in doc["engines"]] == ["redis", "postgresql"]
    assert set(doc["analyses"]) == {"running", "paused", "completed", "failed", "expired"}
    assert doc["analyses"]["failed"] >= 1 and doc["analyses"]["completed"] >= 1
    assert doc["queued"] >= 2 and doc["in_flight"] == 0
    assert doc["pending_reviews"] >= 1 and doc["in_doubt_steps"] >= 1
    assert world.failed_id in [f["analysis_id"] for f in doc["recent_failures"]]
    text = ok(cli("status"))
    for part in (
        "schema version",
        "analyses: ",
        "queued (running, no live run)",
        "pending reviews",
        "steps in doubt",
        "failed in the last 24 h",
    ):
        assert part in text


# -- tables --------------------------------------------------------------------------------
@pytest.mark.parametrize("columns", [80, 200])
def test_tables_keep_every_id_whole(world: World, columns: int) -> None:
    cases = [
        (["analyses", "list", "--limit", "5"], []),
        (["analyses", "show", world.analysis_id], [world.agent_id]),
        (["checkpoints", "list", "--analysis", world.analysis_id], [world.checkpoint_id]),
        (["steps", "in-doubt"], [world.step_id]),
        (["reviews", "list"], [world.review_id]),
        (["memory", "show", world.agent_id], []),
    ]
    for args, ids in cases:
        out = ok(cli(*args, columns=columns))
        lines = out.splitlines()
        # cells, not code points: another test's review may hold a combining mark
        assert all(cell_len(line) <= columns for line in lines), (args, out)
        for i in ids:
            assert any(i in line for line in lines), (args, i, out)
        if args[:2] == ["analyses", "list"]:
            listed = json.loads(ok(cli(*args, "--json")))
            for a in listed:
                assert any(a["analysis_id"] in line for line in lines), out


# -- progress ------------------------------------------------------------------------------
def in_a_terminal(*args: str) -> tuple[int, str]:
    """Run ``amber ARGS`` with stdout and stderr on a pseudo-terminal; its exit code and
    everything it wrote."""
    parent, child = pty.openpty()
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    proc = subprocess.Popen(
        [sys.executable, "-c", "from amber.cli import main; main()", *args],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
        env=dict(os.environ, PYTHONPATH=path, COLUMNS="120", TERM="xterm"),
    )
    os.close(child)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([parent], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(parent, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif proc.poll() is not None:
            break
    os.close(parent)
    return proc.wait(timeout=30), b"".join(chunks).decode(errors="replace")


def test_progress_shows_on_a_terminal_only_without_json(world: World, tmp_path: Path) -> None:
    code, shown = in_a_terminal("gc", "--dry-run")
    assert code == 0 and "retention" in shown and "checkpoint(s)" in shown
    code, shown = in_a_terminal("gc", "--dry-run", "--json")
    assert code == 0 and "retention" not in shown
    json.loads(shown.replace("\r\n", "\n"))
    code, shown = in_a_terminal("wal", "compact", str(wal_dir(tmp_path)), "--keep", "1")
    assert code == 0 and "removing files" in shown
    piped = subprocess.run(
        [sys.executable, "-c", "from amber.cli import main; main()", "gc", "--dry-run"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)])),
        timeout=60,
        check=True,
    )
    assert "retention" not in piped.stdout + piped.stderr


def test_help_shows_each_paragraph_of_a_docstring_as_one_line_to_wrap() -> None:
    from amber.cli.app import reflowed

    doc = """Claim and run queued analyses until SIGTERM (which hand the
        work back); run ``amber worker`` on any machine.

        A second
        paragraph."""
    assert reflowed(doc) == (
        "Claim and run queued analyses until SIGTERM (which hand the work back); run amber"
        " worker on any machine.\n\nA second paragraph."
    )
    out = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    assert "(which hand the work back at the next step); run as many as you like" in out


def test_counts_take_their_nouns_in_the_right_number() -> None:
    from amber.cli.output import counted

    assert counted(1, "run") == "1 run"
    assert counted(0, "error") == "0 errors"
    assert counted(2, "analysis", "analyses") == "2 analyses"
    assert counted(1_200, "step") == "1,200 steps"


def test_help_says_what_a_value_is_in_words_not_in_types() -> None:
    """No ``<str>``, ``<bool>`` (not even on ``--help``), ``<int range>``, ``[1<=x<=...]``
    or ``{review_id}``: each option's help says what it takes; arguments are ``NAME``."""
    from tests.test_readme_commands import command_paths

    for path in sorted(command_paths()):
        out = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "200"}).output
        for clutter in ("<str>", "<bool>", "<int", " range>", "<=x<=", "{"):
            assert clutter not in out, (path, clutter, out)


@pytest.mark.parametrize(
    "listing",
    [
        ["analyses", "list"],
        ["checkpoints", "list"],
        ["steps", "in-doubt"],
        ["reviews", "list"],
        ["sessions", "list"],
    ],
    ids=lambda c: " ".join(c),
)
def test_every_listing_takes_limit_0_as_all(engines: Engines, listing: list[str]) -> None:
    result = CliRunner().invoke(app, [*listing, "--limit", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.output), list)


@pytest.mark.parametrize("columns", [None, 120])
def test_show_never_cuts_a_value_inside(stack: amber.Stack, columns: int | None) -> None:
    """A result is on lines of its own: piped (no COLUMNS) it is one whole line; on a
    120-column terminal it is folded alone, never beside other columns; a timestamp is
    never split from its time."""
    from amber.runtime.app import App

    application = App(f"wide_{uuid.uuid4().hex[:8]}")
    big = {"revenue": 42.5, "notes": "x" * 300, "figures": list(range(60))}

    @application.agent(name=f"wide_{uuid.uuid4().hex[:8]}")
    def wide(ctx: Any) -> dict[str, Any]:
        return big

    aid = application.submit(stack, [wide], {})
    application.run(stack, aid)
    env = {"COLUMNS": "" if columns is None else str(columns)}  # "": piped, no width given
    out = CliRunner().invoke(app, ["analyses", "show", aid], env=env).output
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("result of ")) + 1
    end = lines.index("timeline:")
    folded = lines[start:end]
    assert json.loads("".join(line.strip() for line in folded)) == big, out  # whole, alone
    if columns is None:
        assert len(folded) == 1, out  # piped: full width, one line
    else:
        assert all(len(line) <= columns for line in lines), out
    stamps = [line.split()[0] for line in lines[end + 1 :] if line.startswith("  2")]
    assert stamps and all("T" in stamp for stamp in stamps), out  # date and time together


def test_a_table_of_wide_characters_fits_or_becomes_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An id of characters two cells wide (a task named in Japanese) is measured in cells,
    not characters: the table that would overflow is printed as records instead."""
    out = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=80, color_system=None))
    wide = "名前" * 18  # 36 characters, 72 cells
    output.table([output.Col("review", "id"), output.Col("waits", "id")], [[wide, "task x"]])
    lines = out.getvalue().splitlines()
    assert all(cell_len(line) <= 80 for line in lines), out.getvalue()
    assert any(wide in line for line in lines)


def test_a_table_shows_control_characters_as_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """An id holding C1 controls and a bidi override (the bad-input fuzz stores such ids):
    each is shown as its escape, so nothing reaches the terminal to act on, and the
    table measures what it prints."""
    out = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=80, color_system=None))
    odd = "bad-input:D\x94O3\x8f@\u202e" + "x" * 40
    output.table([output.Col("review", "id"), output.Col("waits", "id")], [[odd, "task t"]])
    text = out.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "\x94" not in text and "\u202e" not in text
    assert "\\x94" in text and "\\u202e" in text
