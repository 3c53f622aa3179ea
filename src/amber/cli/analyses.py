"""``amber analyses list``, ``amber pause`` and ``amber resume``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn
from rich.table import Table

from amber import defaults
from amber.cli.app import OPTIONS, app, console, err_console, friendly
from amber.errors import InvalidValue
from amber.keys import check_reason, check_uuid
from amber.schema.sql import STATUSES

if TYPE_CHECKING:
    from amber.agents.base import BaseAgent

analyses_app = typer.Typer(help="Inspect analyses.", no_args_is_help=True)
app.add_typer(analyses_app, name="analyses")


@analyses_app.command("list")
@friendly
def list_analyses(
    status: Annotated[
        str | None, typer.Option(help=f"Only this status: {', '.join(STATUSES)}.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=defaults.BIGINT_MAX)] = 50,
) -> None:
    """Analyses, newest first, with each agent's progress ("3 of 5 subtasks")."""
    if status is not None and status not in STATUSES:
        raise InvalidValue(
            f"status must be one of {', '.join(STATUSES)}", field="status", value=status
        )
    with OPTIONS.stack() as stack:
        records = stack.analyses.list(status, limit)
        table = Table("analysis", "ticker", "status", "agents", "updated")
        for rec in records:
            latest: dict[str, dict[str, object]] = {}
            for row in stack.checkpointer.summaries(rec.analysis_id, limit=1000):
                latest.setdefault(str(row["agent_type"]), row)  # newest first
            progress = []
            for entry in rec.agents:
                mine = latest.get(entry["agent_type"])
                done = f"{mine['done']} of {mine['total']}" if mine else "not started"
                progress.append(f"{entry['agent_type']}: {done}")
            status = rec.status
            if status == "running" and not stack.analyses.has_runner(rec.analysis_id):
                status = "running (no runner: amber resume takes it over)"
            table.add_row(
                rec.analysis_id,
                rec.stock_ticker,
                status,
                "\n".join(progress),
                rec.updated_at.strftime("%Y-%m-%d %H:%M"),
            )
    console.print(table)


@app.command()
@friendly
def pause(
    analysis_id: str,
    reason: Annotated[str, typer.Option(help="Why (quota_exhausted, awaiting_review, ...).")],
    by: Annotated[str, typer.Option(help="Who pauses.")] = "cli",
) -> None:
    """Pause an analysis: its runner (or this command, if none is alive) snapshots every
    agent to Redis and PostgreSQL, with 14-day TTLs and a durable pause record."""
    analysis_id = check_uuid(analysis_id)
    check_reason(reason, "reason")
    check_reason(by, "by")
    with OPTIONS.stack() as stack:
        report = stack.pause_manager.pause(analysis_id, reason, by)
    console.print(report.message)
    for a in report.agents:
        console.print(
            f"  {a['agent_type']}: {a['completed']} of {a['total']} subtasks, "
            f"{a['l1_keys']} keys kept"
        )


@app.command()
@friendly
def resume(
    analysis_id: str,
    by: Annotated[str, typer.Option(help="Who resumes.")] = "cli",
) -> None:
    """Resume a paused analysis, or take over a running one whose runner died: recover
    each agent's memory, then continue its work here."""
    analysis_id = check_uuid(analysis_id)
    check_reason(by, "by")
    with OPTIONS.stack() as stack:
        coordinator = stack.coordinator
        record = stack.analyses.get(analysis_id)
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("subtasks"),
            console=console,
        )
        tasks: dict[str, TaskID] = {}

        def tick(agent: BaseAgent) -> None:
            if not tasks:  # shown from the first subtask on: a refusal stays one line
                bar.start()
                for entry in record.agents:
                    tasks[entry["agent_id"]] = bar.add_task(entry["agent_type"], total=None)
            bar.update(
                tasks[agent.agent_id],
                completed=len(agent.completed_subtasks),
                total=len(agent.subtasks),
            )

        coordinator.on_progress = tick
        try:
            report = stack.pause_manager.resume(analysis_id, by)
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
            f"  {agent_type}: {r.path} in {r.ms:.1f} ms, {r.keys} keys, {verified}{outcome}"
        )
    if report.paused_again:
        console.print(f"paused again: {report.paused_again.reason}")
