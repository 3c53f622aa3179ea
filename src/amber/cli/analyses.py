"""``amber analyses list``, ``amber pause`` and ``amber resume``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from amber.cli import ids
from amber.cli.app import OPTIONS, app, console, err_console, friendly
from amber.cli.ids import uuid_prefix
from amber.cli.output import Col, JsonFlag, Limit, limit_rows, print_json, table
from amber.cli.runtime import AppOption, load, retry, show
from amber.errors import InvalidValue
from amber.keys import check_reason
from amber.schema.sql import STATUSES

if TYPE_CHECKING:
    from amber.agents.base import BaseAgent
    from amber.runtime.analyses import AnalysisRecord
    from amber.stack import Stack

analyses_app = typer.Typer(help="Inspect analyses.", no_args_is_help=True)
app.add_typer(analyses_app, name="analyses")
analyses_app.command("show")(show)
analyses_app.command("retry")(retry)


@analyses_app.command("list")
@friendly
def list_analyses(
    status: Annotated[
        str | None, typer.Option(help=f"Only this status: {', '.join(STATUSES)}.")
    ] = None,
    limit: Limit = 50,
    as_json: JsonFlag = False,
) -> None:
    """Analyses, newest first, with each agent's progress ("3 of 5")."""
    if status is not None and status not in STATUSES:
        raise InvalidValue(
            f"status must be one of {', '.join(STATUSES)}", field="status", value=status
        )
    with OPTIONS.stack() as stack:
        docs = [_listed(stack, rec) for rec in stack.analyses.list(status, limit_rows(limit))]
    if as_json:
        print_json(docs)
        return
    rows = []
    for d in docs:
        progress = [f"{a['agent_type']}: {_progress_text(a)}" for a in d["agents"]]
        rows.append(
            [
                d["analysis_id"],
                d["ticker"] or "",
                d["state"] if d["pause"] is None else f"{d['state']}: {d['pause']['says']}",
                "\n".join(progress),
                d["updated_at"].strftime("%Y-%m-%d %H:%M"),
            ]
        )
    table(
        [
            Col("analysis", "id"),
            Col("ticker"),
            Col("status", "text"),
            Col("agents", "text"),
            Col("updated"),
        ],
        rows,
    )


def _listed(stack: Stack, rec: AnalysisRecord) -> dict[str, Any]:
    """One analysis as ``amber analyses list --json`` prints it: the status read model's
    summary, the same the API and the dashboard show."""
    from amber.runtime import status

    return status.summary(stack, rec)


def _progress_text(agent: dict[str, Any]) -> str:
    from amber.runtime import status

    return status.progress_text(agent)


@app.command()
@friendly
def pause(
    analysis_id: str,
    reason: Annotated[str, typer.Option(help="Why (quota_exhausted, awaiting_review, ...).")],
    by: Annotated[str, typer.Option(help="Who pauses.")] = "cli",
) -> None:
    """Pause an analysis: its runner (or this command, if none is alive) snapshots every
    agent to Redis and PostgreSQL, with 14-day TTLs and a durable pause record."""
    uuid_prefix(analysis_id, "analysis_id")
    check_reason(reason, "reason")
    check_reason(by, "by")
    with OPTIONS.stack() as stack:
        aid = ids.analysis_id(stack, analysis_id)
        report = stack.pause_manager.pause(aid, reason, by)
    console.print(report.message)
    for a in report.agents:
        console.print(
            f"  {a['agent_type']}: {a['completed']} of {a['total']} {a.get('word', 'subtasks')}, "
            f"{a['l1_keys']} keys kept"
        )


@app.command()
@friendly
def resume(
    analysis_id: str,
    by: Annotated[str, typer.Option(help="Who resumes.")] = "cli",
    app_target: AppOption = None,
) -> None:
    """Resume a paused analysis, or take over a running one no live run holds (a dead
    runner's, or a queued one): recover each agent's memory, then continue here."""
    from amber.runtime.pause import PauseManager

    uuid_prefix(analysis_id, "analysis_id")
    check_reason(by, "by")
    application = load(app_target)
    with OPTIONS.stack() as stack:
        analysis_id = ids.analysis_id(stack, analysis_id)
        coordinator = stack.coordinator.using(registry=application.registry)
        record = stack.analyses.get(analysis_id)
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("subtasks"),
            console=err_console,  # progress is no output: stdout keeps the report alone
            disable=not err_console.is_terminal,
        )
        tasks: dict[str, TaskID] = {}

        def tick(agent: BaseAgent) -> None:
            if not tasks:  # shown from the first subtask on: a refusal stays one line
                bar.start()
                for entry in record.agents:
                    tasks[entry["agent_id"]] = bar.add_task(entry["agent_type"], total=None)
            done, total = _progress(agent)
            bar.update(tasks[agent.agent_id], completed=done, total=total)

        coordinator.on_progress = tick
        try:
            report = PauseManager(stack.analyses, coordinator).resume(analysis_id, by)
        finally:
            if bar.live.is_started:
                bar.stop()
    if not report.resumed:
        err_console.print(f"[red]error:[/red] {report.message}", highlight=False)
        raise typer.Exit(1)
    console.print(report.message)
    for agent_type, r in report.recovery.items():
        result = report.results.get(agent_type)
        outcome = f"; {result.progress}, {result.status}" if result else ""
        verified = "verified" if r.verified else "NOT verified"
        console.print(
            f"  {agent_type}: {r.path} in {r.ms:.1f} ms, {r.keys} keys, {verified}{outcome}",
            highlight=False,
        )
        if r.path == "rolled_back":
            console.print(
                f"    its memory at checkpoint {r.rolled_back_from} was lost: rolled back to"
                f" checkpoint {r.rolled_back_to}, running again: {', '.join(r.rerun) or '-'}",
                highlight=False,
            )
    if report.paused_again:
        console.print(f"paused again: {report.paused_again.reason}")


def _progress(agent: BaseAgent) -> tuple[int, int | None]:
    """(steps done, steps in all) for the progress bar: a subtask agent counts its declared
    subtasks (not the steps inside them); a function agent finds its steps as it runs, so
    its total is unknown until it returns."""
    if agent.dynamic:
        done = len(agent.completed_subtasks)
        return done, None if agent.pending_subtasks else done
    declared = set(agent.subtasks)
    return sum(1 for s in agent.completed_subtasks if s in declared), len(agent.subtasks)
