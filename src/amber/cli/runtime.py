"""``amber worker``, ``amber submit``, ``amber steps``, ``amber reviews approve|reject`` and
``amber analyses show|retry``: the runtime from the command line.

Every command that runs user code takes ``--app module:attr`` (or ``AMBER_APP``); without
either it runs the example analysts (``amber.examples:app``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.text import Text

from amber.cli import ids, output
from amber.cli.app import OPTIONS, app, console, friendly
from amber.cli.ids import uuid_prefix
from amber.cli.output import AnalysisFilter, Col, JsonFlag, Limit, counted, print_json, table
from amber.errors import InvalidValue
from amber.keys import check_reason

if TYPE_CHECKING:
    from amber.runtime.app import App
    from amber.runtime.reviews import Review
    from amber.stack import Stack

reviews_app = typer.Typer(help="Reviews waiting for a person: one queue.", no_args_is_help=True)
app.add_typer(reviews_app, name="reviews")

DEFAULT_APP = "amber.examples:app"

AppOption = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="AMBER_APP",
        help=f"The application, as module:attr (default: {DEFAULT_APP}).",
    ),
]
By = Annotated[str, typer.Option(help="Who does this (recorded on the timeline).")]
AnalysisArg = Annotated[str, typer.Argument(help="An analysis id or a unique prefix of one.")]

steps_app = typer.Typer(help="At-most-once steps left in doubt by a crash.", no_args_is_help=True)
app.add_typer(steps_app, name="steps")


def load(target: str | None) -> App:
    """The app named by ``--app``/``AMBER_APP``, else the example analysts."""
    from amber.runtime.app import load_app

    return load_app(target or DEFAULT_APP)


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidValue(f"{what} is not JSON: {exc}", field=what) from None


def _json_file(path: Path | None, what: str) -> Any:
    if path is None:
        return None
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InvalidValue(f"{what} {path} is not JSON: {exc}", field=what) from None


# -- worker and submit --------------------------------------------------------------------
@app.command()
@friendly
def worker(
    app_target: AppOption = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, max=10_000, help="Analyses run at once (AMBER_WORKER_CONCURRENCY)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each run.")] = False,
) -> None:
    """Claim and run queued analyses of the app until SIGTERM or Ctrl-C (which hand the
    work back at the next step); run as many as you like, on any machine."""
    from amber.runtime.worker import banner

    application = load(app_target)
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    with OPTIONS.stack() as stack:
        w = application.worker(stack, concurrency)
        w.install_signals()
        console.print(banner(w.name, application.name, w.concurrency), highlight=False)
        stats = w.run()
    console.print(
        f"worker {w.name} stopped: {stats.claimed} claimed ({stats.taken_over} taken over),"
        f" {counted(stats.finished, 'run')} ended, {counted(stats.errors, 'error')}",
        highlight=False,
    )


@app.command()
@friendly
def submit(
    definition: Annotated[str, typer.Argument(help="An analysis the app defines.")],
    app_target: AppOption = None,
    input_json: Annotated[
        str | None, typer.Option("--input", help="The input, a JSON object.")
    ] = None,
    ticker: Annotated[str | None, typer.Option(help="The company's ticker.")] = None,
    by: By = "cli",
) -> None:
    """Queue an analysis for the app's workers; prints its id."""
    application = load(app_target)
    doc = _json_arg(input_json, "input")
    with OPTIONS.stack() as stack:
        aid = application.submit(stack, definition, doc, ticker=ticker, by=check_reason(by, "by"))
    console.print(aid, highlight=False)


# -- analyses show | retry (registered by amber.cli.analyses) ------------------------------
RESULT_SHOWN = 2_000
"""Characters of an agent's result ``amber analyses show`` prints (``--json``: all)."""


@friendly
def show(analysis_id: AnalysisArg, as_json: JsonFlag = False) -> None:
    """One analysis: each agent's result, steps and checkpoints, and its timeline."""
    uuid_prefix(analysis_id, "analysis_id")
    with OPTIONS.stack() as stack:
        aid = ids.analysis_id(stack, analysis_id)
        report = describe(stack, aid)
    if as_json:
        print_json(report)
        return
    head = [f"analysis {aid}", report["status"], report["ticker"], report["definition"]]
    console.print(" · ".join(part for part in head if part), highlight=False)
    if report["pause"] is not None:
        console.print(f"paused: {report['pause']['says']}", highlight=False)
    agents = [
        [
            a["agent_type"],
            a["agent_id"],
            a["progress"],
            ", ".join(a["steps"]) or "-",
            a["checkpoints_said"],
        ]
        for a in report["agents"]
    ]
    table(
        [
            Col("agent"),
            Col("agent id", "id"),
            Col("status", "text"),
            Col("steps", "text"),
            Col("checkpoints", "text"),
        ],
        agents,
    )
    # values on lines of their own, never cut inside a table cell: a terminal gets each
    # folded whole at its width, a pipe (full width) as one line
    for a in report["agents"]:
        if a["result"] is not None:
            result = orjson.dumps(a["result"]).decode()
            if len(result) > RESULT_SHOWN:
                result = result[:RESULT_SHOWN] + " ... (the rest with --json)"
            console.print(f"result of {a['agent_type']}:", highlight=False)
            console.print(Text(f"  {result}", overflow="fold"), highlight=False)
    console.print("timeline:", highlight=False)
    for e in report["timeline"]:
        by = f" by {e['by']}" if e["by"] else ""
        at = e["at"].strftime("%Y-%m-%dT%H:%M:%S")
        console.print(f"  {at}  {e['kind']}{by}", highlight=False)
        if e["detail"]:
            detail = orjson.dumps(e["detail"]).decode()
            console.print(Text(f"    {detail}", overflow="fold"), highlight=False)


def describe(stack: Stack, aid: str) -> dict[str, Any]:
    """An analysis as ``amber analyses show`` prints it: the status read model's detail
    (the same progress, liveness and words as the list, the API and the dashboard)."""
    from amber.runtime import status

    shown = status.detail(stack, stack.analyses.get(aid))
    agents = [
        {
            "agent_type": a["agent_type"],
            "agent_id": a["agent_id"],
            "status": a["status"],
            "progress": status.progress_text(a),
            "steps": a["steps"],
            "checkpoints": len(a["checkpoints"]),
            "checkpoints_said": a["checkpoints_said"],
            "result": a["result"],
        }
        for a in shown["agents"]
    ]
    return {
        "analysis_id": aid,
        "status": shown["state"],
        "ticker": shown["ticker"],
        "definition": shown["definition"],
        "input": shown["input"],
        "agents": agents,
        "timeline": shown["timeline"],
        "pause": shown["pause"],
        "pauses": stack.analyses.pauses(aid),
    }


@friendly
def retry(
    analysis_id: AnalysisArg,
    app_target: AppOption = None,
    queue: Annotated[
        bool, typer.Option("--queue", help="Leave it for a worker instead of running it here.")
    ] = False,
    by: By = "cli",
) -> None:
    """Continue a failed analysis from its last checkpoints (here, or by a worker)."""
    uuid_prefix(analysis_id, "analysis_id")
    check_reason(by, "by")
    application = None if queue else load(app_target)
    with OPTIONS.stack() as stack:
        aid = ids.analysis_id(stack, analysis_id)
        stack.analyses.retry(aid, by)
        if application is None:
            console.print(f"analysis {aid} is queued again for a worker", highlight=False)
            return
        results = application.run(stack, aid)
    for agent_type, r in results.items():
        console.print(f"  {agent_type}: {r.progress}, {r.status}", highlight=False)


# -- steps in-doubt | resolve ------------------------------------------------------------
@steps_app.command("in-doubt")
@friendly
def in_doubt(
    analysis: AnalysisFilter = None,
    limit: Limit = 100,
    as_json: JsonFlag = False,
) -> None:
    """At-most-once steps that started and never recorded a result (their run died)."""
    resolve = ids.analysis_filter(analysis)
    with OPTIONS.stack() as stack:
        rows = stack.intents.in_doubt(resolve(stack), output.limit_rows(limit))
    if as_json:
        print_json([i.as_dict() for i in rows])
        return
    table(
        [
            Col("step_id", "id"),
            Col("analysis", "id"),
            Col("agent"),
            Col("step"),
            Col("function", "text"),
            Col("started"),
        ],
        [
            [
                i.step_id,
                i.analysis_id,
                i.agent_type,
                i.step_key,
                i.fn,
                i.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            ]
            for i in rows
        ],
    )
    console.print(f"{len(rows)} step(s) in doubt")


@steps_app.command("resolve")
@friendly
def resolve(
    step_id: Annotated[str, typer.Argument(help="A step id or a unique prefix of one.")],
    rerun: Annotated[bool, typer.Option("--rerun", help="Run the step again.")] = False,
    skip: Annotated[
        bool, typer.Option("--skip", help="Do not run it; record --result as its result.")
    ] = False,
    result: Annotated[
        Path | None, typer.Option(help="A JSON file: the step's result, with --skip.")
    ] = None,
    by: By = "cli",
) -> None:
    """Decide an in-doubt step, once; its analysis, paused for it, is queued again."""
    if rerun == skip:
        raise InvalidValue("give exactly one of --rerun and --skip", field="rerun")
    if rerun and result is not None:
        raise InvalidValue("--result goes with --skip, not --rerun", field="result")
    value = _json_file(result, "result")
    uuid_prefix(step_id, "step_id")
    check_reason(by, "by")
    with OPTIONS.stack() as stack:
        intent = stack.intents.resolve(ids.step_id(stack, step_id), rerun, value, by)
    verb = "re-runs" if rerun else "is skipped"
    then = (
        "is queued again: a worker (or amber resume) continues it"
        if intent.resumed
        else "continues when it resumes"
    )
    console.print(
        f"step {intent.step_key} of {intent.agent_type} {verb}; analysis"
        f" {intent.analysis_id} {then}",
        highlight=False,
    )


# -- reviews approve | reject -------------------------------------------------------------
def _decide(review_id: str, outcome: str, by: str, comment: str | None, data: str | None) -> None:
    value = _json_arg(data, "data")
    with OPTIONS.stack() as stack:
        review = stack.reviews.decide(ids.review_id(stack, review_id), outcome, by, comment, value)
    if review.analysis_id is None:
        console.print(
            f"review {review.ref} of task {review.task_id} {review.status}", highlight=False
        )
        return
    console.print(
        f"review {review.review_id} ({review.kind}) {review.status}; analysis"
        f" {review.analysis_id} continues when a worker (or amber resume) runs it",
        highlight=False,
    )


ReviewArg = Annotated[
    str, typer.Argument(help="A review id (or a unique prefix of one), or a task's scope:id.")
]
Comment = Annotated[str | None, typer.Option(help="A note for the record.")]
Data = Annotated[str | None, typer.Option(help="JSON handed to the waiting step.")]


@reviews_app.command("approve")
@friendly
def approve(
    review_id: ReviewArg, by: By = "cli", comment: Comment = None, data: Data = None
) -> None:
    """Approve a pending review (once): its analysis is queued again."""
    _decide(review_id, "approved", by, comment, data)


@reviews_app.command("reject")
@friendly
def reject(
    review_id: ReviewArg, by: By = "cli", comment: Comment = None, data: Data = None
) -> None:
    """Reject a pending review (once): its analysis is queued again."""
    _decide(review_id, "rejected", by, comment, data)


ReviewStatus = Annotated[
    str | None,
    typer.Option(help="pending (default), approved, rejected, expired, or all."),
]
Scope = Annotated[
    str | None,
    typer.Option(help="Only the sessions module's reviews saved under this key prefix."),
]


@reviews_app.command("list")
@friendly
def list_reviews(
    status: ReviewStatus = "pending",
    analysis: AnalysisFilter = None,
    scope: Scope = None,
    limit: Limit = 100,
    as_json: JsonFlag = False,
) -> None:
    """Reviews waiting for a person (or decided ones, with --status): those analyses wait
    for and those the sessions module saved, in one queue, oldest first."""
    resolve = ids.analysis_filter(analysis)
    wanted = None if status == "all" else status
    with OPTIONS.stack() as stack:
        rows = stack.reviews.list(wanted, resolve(stack), output.limit_rows(limit), scope=scope)
    if as_json:
        print_json([r.as_dict() for r in rows])
        return
    table(
        [
            Col("review", "id"),
            Col("waits", "id"),
            Col("kind"),
            Col("status"),
            Col("deadline"),
            Col("payload", "text"),
        ],
        [_review_row(r) for r in rows],
    )
    console.print(f"{len(rows)} {wanted or 'listed'} review(s)")


def _review_row(r: Review) -> list[str]:
    payload = orjson.dumps(r.payload).decode()
    if r.analysis_id is not None:
        waits = f"analysis {r.analysis_id} ({r.agent_type})"
    else:
        waits = f"task {r.task_id} (confidence {r.confidence:.2f})"
    return [
        r.ref,
        waits,
        r.kind or "-",
        r.status,
        r.deadline.strftime("%Y-%m-%d %H:%M:%S") if r.deadline else "-",
        payload if len(payload) <= 120 else payload[:117] + "...",
    ]
