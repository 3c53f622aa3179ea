"""The runtime's command line on real servers: ``amber worker``, ``submit``, ``analyses
show|retry``, ``resume``, ``steps in-doubt|resolve`` and ``reviews list|approve|reject``.

Commands run in this process through Typer's runner, except where a process must really
die (an at-most-once step killed with SIGKILL) or run until signalled (``amber worker``).
Every refusal is one ``error: ...`` line and exit code 1, never a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import amber
from amber.cli import app as cli
from tests.conftest import Engines

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
APP = ["--app", "tests.runtime.cliapp:app"]
NO_SUCH_ID = "00000000-0000-4000-8000-000000000000"


def amber_cli(*args: str) -> Result:
    return runner.invoke(cli, list(args))


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def one_error_line(result: Result) -> str:
    """The single ``error:`` line of a command that failed cleanly with exit code 1."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def submit(definition: str, doc: dict[str, Any], *extra: str) -> str:
    aid = ok(amber_cli("submit", definition, *APP, "--input", json.dumps(doc), *extra)).strip()
    assert len(aid) == 36 and aid.count("-") == 4, aid
    return aid


def show(aid: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(ok(amber_cli("analyses", "show", aid, "--json")))
    return report


def kinds(aid: str) -> list[str]:
    return [e["kind"] for e in show(aid)["timeline"]]


def ledger(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def amber_process(*args: str) -> list[str]:
    return [sys.executable, "-c", "from amber.cli import main; main()", *args]


def process_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return dict(os.environ, PYTHONPATH=path, **extra)


def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# -- submit, run, show ---------------------------------------------------------------------
def test_submit_queues_and_show_prints_results_and_the_timeline_after_the_run(
    engines: Engines, tmp_path: Path
) -> None:
    book = tmp_path / "ledger"
    aid = submit("cli_summary", {"text": "one two three four", "ledger": str(book)})
    queued = show(aid)
    assert queued["status"] == "running (queued: no live run holds it)"
    assert queued["definition"] == "cli_summary"
    assert queued["input"] == {"text": "one two three four", "ledger": str(book)}
    assert [(a["agent_type"], a["status"]) for a in queued["agents"]] == [
        ("cli_summariser", "not started")
    ]

    out = ok(amber_cli("resume", aid, *APP))
    assert "2 of 2 steps, completed" in out  # a function agent's steps, in its own word
    report = show(aid)
    assert report["status"] == "completed"
    (agent,) = report["agents"]
    assert agent["status"] == "completed" and agent["result"] == {"words": 4}
    assert agent["steps"] == ["fetch", "count"]
    assert (agent["checkpoints"], agent["checkpoints_said"]) == (0, "purged at completion")
    assert queued["agents"][0]["checkpoints_said"] == "none yet"
    assert kinds(aid)[0] == "submitted" and kinds(aid)[-1] == "completed"
    assert ledger(book) == ["fetch", "count"]

    table = ok(amber_cli("analyses", "show", aid))
    assert f"analysis {aid} · completed · cli_summary" in table  # no ticker: left out
    assert '{"words":4}' in table and "fetch, count" in table
    assert "purged at completion" in table  # not a bare 0: the results are kept
    assert "submitted" in table and "completed" in table


def test_submit_takes_a_ticker_and_the_app_from_amber_app(engines: Engines) -> None:
    result = runner.invoke(
        cli, ["submit", "cli_summary", "--ticker", "MSFT"], env={"AMBER_APP": APP[1]}
    )
    aid = ok(result).strip()
    assert show(aid)["ticker"] == "MSFT"
    ok(amber_cli("resume", aid, *APP))
    assert show(aid)["agents"][0]["result"] == {"words": 3}


def test_a_worker_runs_what_is_submitted_and_hands_back_on_sigterm(
    stack: amber.Stack, tmp_path: Path
) -> None:
    worker = subprocess.Popen(
        amber_process("worker", *APP, "--concurrency", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=process_env(AMBER_WORKER_POLL="0.1"),
        cwd=ROOT,
    )
    try:
        books = [tmp_path / f"ledger-{i}" for i in range(3)]
        aids = [submit("cli_summary", {"text": "a b", "ledger": str(b)}) for b in books]
        until(
            lambda: all(stack.analyses.get(a).status == "completed" for a in aids),
            60,
            "the worker to complete three analyses",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "app cli_tests, concurrency 2" in out
    assert "stopped:" in out and "3 runs ended, 0 errors" in out
    for aid, book in zip(aids, books, strict=True):
        assert ledger(book) == ["fetch", "count"]
        assert show(aid)["agents"][0]["result"] == {"words": 2}
        assert "claimed" in kinds(aid)


# -- retry ---------------------------------------------------------------------------------
def test_a_failed_analysis_is_retried_from_its_last_checkpoint(
    engines: Engines, tmp_path: Path
) -> None:
    book, broken = tmp_path / "ledger", tmp_path / "broken"
    broken.touch()
    aid = submit("cli_flaky", {"broken": str(broken), "ledger": str(book)})
    ok(amber_cli("resume", aid, *APP))
    failed = show(aid)
    assert failed["status"] == "failed"
    assert "supplier down" in failed["agents"][0]["result"]["error"]

    out = ok(amber_cli("analyses", "retry", aid, *APP))  # still broken: it fails again
    assert "failed" in out and show(aid)["status"] == "failed"

    broken.unlink()
    out = ok(amber_cli("analyses", "retry", aid, *APP, "--by", "ops"))
    assert "cli_flaky: 2 of 2 steps, completed" in out
    report = show(aid)
    assert report["status"] == "completed"
    assert report["agents"][0]["result"] == {"first": "kept", "supplier": "up"}
    assert ledger(book) == ["fetch", "check", "check", "check"]  # fetch was recorded once
    assert kinds(aid).count("retried") == 2
    line = one_error_line(amber_cli("analyses", "retry", aid, *APP))
    assert "analysis is completed; only a failed analysis can be retried" in line


def test_retry_with_queue_leaves_the_analysis_for_a_worker(
    engines: Engines, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.touch()
    aid = submit("cli_flaky", {"broken": str(broken)})
    ok(amber_cli("resume", aid, *APP))
    assert show(aid)["status"] == "failed"
    broken.unlink()
    out = ok(amber_cli("analyses", "retry", aid, "--queue"))
    assert f"analysis {aid} is queued again for a worker" in out
    assert show(aid)["status"] == "running (queued: no live run holds it)"
    ok(amber_cli("resume", aid, *APP))
    assert show(aid)["status"] == "completed"


# -- at-most-once steps in doubt -----------------------------------------------------------
def crash_in_payment(tmp_path: Path, lease_seconds: str = "1") -> tuple[str, Path]:
    """Submit a payment and run it in a process that dies inside the at-most-once step,
    after paying and before amber records it."""
    marker = tmp_path / "paid"
    aid = submit("cli_payment", {"marker": str(marker), "amount": 100})
    child = subprocess.run(
        amber_process("resume", aid, *APP),
        capture_output=True,
        text=True,
        env=process_env(AMBER_LEASE_SECONDS=lease_seconds),
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert marker.read_text() == "paid 100\n"
    return aid, marker


def in_doubt_step(stack: amber.Stack, aid: str) -> str:
    """The step id ``amber steps in-doubt`` lists for the analysis (once its dead run's
    lease has lapsed)."""
    until(lambda: len(stack.intents.in_doubt(aid)) == 1, 10, "the step to be in doubt")
    (intent,) = stack.intents.in_doubt(aid)
    listed = ok(amber_cli("steps", "in-doubt", "--analysis", aid))
    assert intent.step_id in listed and "cli_payer" in listed and "pay" in listed
    assert "send_payment" in listed and "1 step(s) in doubt" in listed
    assert intent.step_id in ok(amber_cli("steps", "in-doubt"))
    return intent.step_id


def test_a_crashed_at_most_once_step_is_listed_skipped_with_a_result_and_resumed(
    stack: amber.Stack, tmp_path: Path
) -> None:
    aid, marker = crash_in_payment(tmp_path)
    step_id = in_doubt_step(stack, aid)

    out = ok(amber_cli("resume", aid, *APP))  # never re-run blindly: it pauses
    assert "step_in_doubt" in out
    assert stack.analyses.get(aid).status == "paused"

    receipt = tmp_path / "receipt.json"
    receipt.write_text('{"receipt": "bank-7"}')
    out = ok(amber_cli("steps", "resolve", step_id, "--skip", "--result", str(receipt)))
    assert (
        f"step pay of cli_payer is skipped; analysis {aid} is queued again: a worker"
        " (or amber resume) continues it"
    ) in out
    assert stack.analyses.get(aid).status == "running"  # the decision queued it again
    assert kinds(aid)[-2:] == ["step_resolved", "resumed"]
    line = one_error_line(amber_cli("steps", "resolve", step_id, "--rerun"))
    assert "step is skip, not in doubt: nothing to resolve" in line

    ok(amber_cli("resume", aid, *APP, "--by", "ops"))
    report = show(aid)
    assert report["status"] == "completed"
    assert report["agents"][0]["result"] == {"receipt": {"receipt": "bank-7"}}
    assert marker.read_text() == "paid 100\n"  # paid once
    assert "0 step(s) in doubt" in ok(amber_cli("steps", "in-doubt", "--analysis", aid))


def test_a_crashed_at_most_once_step_resolved_to_rerun_runs_again(
    stack: amber.Stack, tmp_path: Path
) -> None:
    aid, _ = crash_in_payment(tmp_path)
    step_id = in_doubt_step(stack, aid)
    out = ok(amber_cli("steps", "resolve", step_id, "--rerun", "--by", "ops"))
    assert "re-runs; analysis" in out
    ok(amber_cli("resume", aid, *APP))
    report = show(aid)
    assert report["status"] == "completed"
    assert report["agents"][0]["result"] == {"receipt": "paid 100 again"}


def test_a_step_is_in_doubt_as_soon_as_its_process_died(stack: amber.Stack, tmp_path: Path) -> None:
    aid, _ = crash_in_payment(tmp_path, lease_seconds="60")
    # claimable as soon as PostgreSQL has seen the dead process's connection close (a
    # moment after the kill), far sooner than the 60 s lease would lapse
    until(lambda: not stack.analyses.has_runner(aid), 10, "the dead run's lease to lapse")
    assert "1 step(s) in doubt" in ok(amber_cli("steps", "in-doubt", "--analysis", aid))


# -- reviews -------------------------------------------------------------------------------
def paused_for_review(stack: amber.Stack, text: str) -> tuple[str, str]:
    aid = submit("cli_publish", {"text": text})
    out = ok(amber_cli("resume", aid, *APP))
    assert "awaiting_review" in out
    assert stack.analyses.get(aid).status == "paused"
    listed = ok(amber_cli("reviews", "list", "--analysis", aid))
    (review,) = stack.reviews.list("pending", aid)
    assert review.review_id in listed and "publish" in listed and f'"draft":"{text}"' in listed
    assert "1 pending review(s)" in listed
    assert review.review_id in ok(amber_cli("reviews", "list"))
    return aid, review.review_id


def test_an_approved_review_is_delivered_once_and_the_analysis_continues(
    stack: amber.Stack,
) -> None:
    aid, rid = paused_for_review(stack, "launch")
    waiting = f"waiting for review {rid} (publish): amber reviews approve {rid} (or reject)"
    assert show(aid)["pause"]["says"] == waiting  # a review's wait, not a bare reason
    assert f"paused: {waiting}" in ok(amber_cli("analyses", "show", aid))
    listed = json.loads(ok(amber_cli("analyses", "list", "--limit", "0", "--json")))
    assert [d["pause"]["says"] for d in listed if d["analysis_id"] == aid] == [waiting]
    line = one_error_line(amber_cli("resume", aid, *APP))  # it would only pause again
    assert waiting in line and "deciding it queues the analysis again" in line
    out = ok(
        amber_cli(
            "reviews", "approve", rid, "--by", "alice", "--comment", "fine", "--data", '{"n": 1}'
        )
    )
    assert f"review {rid} (publish) approved" in out
    assert show(aid)["status"] == "running (queued: no live run holds it)"
    line = one_error_line(amber_cli("reviews", "approve", rid, "--by", "bob"))
    assert "review is already approved; its decision stands" in line
    line = one_error_line(amber_cli("reviews", "reject", rid))
    assert "review is already approved" in line
    assert "0 pending review(s)" in ok(amber_cli("reviews", "list", "--analysis", aid))

    ok(amber_cli("resume", aid, *APP))
    report = show(aid)
    assert report["status"] == "completed"
    result = report["agents"][0]["result"]
    assert result == {"outcome": "approved", "by": "alice", "data": {"n": 1}}
    assert "review_decided" in kinds(aid)
    assert stack.reviews.get(rid).decision["comment"] == "fine"  # type: ignore[index]


def test_a_rejected_review_reaches_the_waiting_step(stack: amber.Stack) -> None:
    aid, rid = paused_for_review(stack, "risky")
    assert "rejected" in ok(amber_cli("reviews", "reject", rid, "--comment", "no"))
    line = one_error_line(amber_cli("reviews", "approve", rid))
    assert "review is already rejected" in line
    ok(amber_cli("resume", aid, *APP))
    assert show(aid)["agents"][0]["result"] == {"outcome": "rejected", "by": "cli", "data": None}


# -- bad input -----------------------------------------------------------------------------
BAD = [
    (["worker", "--app", "nosuch:app"], "app module 'nosuch' could not be imported"),
    (["worker", "--app", "tests.runtime.cliapp"], "--app must be module:attr"),
    (["worker", "--app", ":app"], "--app must be module:attr"),
    (["submit", "cli_summary", "--app", "tests.runtime.cliapp:NOT_AN_APP"], "is a dict, not"),
    (["submit", "cli_summary", "--app", "tests.runtime.cliapp:cli_summariser"], "function"),
    (["submit", "cli_summary", "--app", "tests.runtime.cliapp:nosuch"], "has no attribute"),
    (["submit", "nosuch", *APP], "analysis 'nosuch' is not defined in app 'cli_tests'"),
    (["submit", "cli_summary", *APP, "--input", "{"], "input is not JSON"),
    (["submit", "cli_summary", *APP, "--input", "[1, 2]"], "input must be a JSON object"),
    (["submit", "cli_summary", *APP, "--input", '"text"'], "input must be a JSON object"),
    (["submit", "cli_summary", *APP, "--input", '{"t": "a\\u0000b"}'], "input holds a NUL"),
    (["submit", "cli_summary", *APP, "--ticker", "A*"], "stock_ticker"),
    (["analyses", "show", "nope"], "analysis_id is not a UUID"),
    (["analyses", "show", NO_SUCH_ID], "no analysis with this id"),
    (["analyses", "retry", "nope", *APP], "analysis_id is not a UUID"),
    (["analyses", "retry", NO_SUCH_ID, *APP], "no analysis with this id"),
    (["analyses", "retry", NO_SUCH_ID, "--queue"], "no analysis with this id"),
    (["analyses", "retry", NO_SUCH_ID, "--app", "nosuch:app"], "could not be imported"),
    (["resume", "nope", *APP], "analysis_id is not a UUID"),
    (["resume", NO_SUCH_ID, *APP], "no analysis with this id"),
    (["resume", NO_SUCH_ID, "--app", "nosuch"], "--app must be module:attr"),
    (["steps", "in-doubt", "--analysis", "nope"], "analysis_id is not a UUID"),
    (["steps", "resolve", "nope", "--skip"], "step_id is not a UUID"),
    (["steps", "resolve", NO_SUCH_ID, "--skip"], "no at-most-once step with this id"),
    (["steps", "resolve", NO_SUCH_ID, "--rerun"], "no at-most-once step with this id"),
    (["steps", "resolve", NO_SUCH_ID], "give exactly one of --rerun and --skip"),
    (["steps", "resolve", NO_SUCH_ID, "--rerun", "--skip"], "give exactly one of --rerun"),
    (["steps", "resolve", NO_SUCH_ID, "--skip", "--result", "/nonexistent/r.json"], "No such"),
    (["reviews", "list", "--analysis", "nope"], "analysis_id is not a UUID"),
    (["reviews", "approve", "nope"], "no review with this id"),
    (["reviews", "approve", "a:b:c"], "review_id contains ':'"),
    (["reviews", "list", "--status", "maybe"], "status must be one of"),
    (["reviews", "approve", NO_SUCH_ID], "no review with this id"),
    (["reviews", "reject", NO_SUCH_ID], "no review with this id"),
    (["reviews", "approve", NO_SUCH_ID, "--data", "{"], "data is not JSON"),
    (["reviews", "approve", NO_SUCH_ID, "--by", "a\x00b"], "by"),
]


@pytest.mark.parametrize(("args", "expected"), BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_bad_input_is_one_error_line(engines: Engines, args: list[str], expected: str) -> None:
    line = one_error_line(amber_cli(*args))
    assert expected in line, line


def test_an_unknown_app_from_amber_app_is_one_error_line(engines: Engines) -> None:
    result = runner.invoke(cli, ["submit", "cli_summary"], env={"AMBER_APP": "nosuch:app"})
    assert "app module 'nosuch' could not be imported" in one_error_line(result)


def test_a_result_file_that_is_not_json_is_refused_before_anything_is_decided(
    engines: Engines, tmp_path: Path
) -> None:
    bad = tmp_path / "result.json"
    bad.write_text("{not json")
    line = one_error_line(amber_cli("steps", "resolve", NO_SUCH_ID, "--skip", "--result", str(bad)))
    assert f"result {bad} is not JSON" in line
    line = one_error_line(
        amber_cli("steps", "resolve", NO_SUCH_ID, "--rerun", "--result", str(bad))
    )
    assert "--result goes with --skip, not --rerun" in line


def test_a_worker_concurrency_below_one_is_a_usage_error(engines: Engines) -> None:
    result = amber_cli("worker", *APP, "--concurrency", "0")
    assert result.exit_code == 2 and "Traceback" not in result.output
