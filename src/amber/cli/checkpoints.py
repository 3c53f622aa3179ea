"""``amber checkpoints list|show`` and ``amber gc``."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer
from rich.table import Table

from amber import defaults
from amber.cli.app import OPTIONS, app, console, friendly
from amber.keys import check_uuid

checkpoints_app = typer.Typer(help="Inspect checkpoints.", no_args_is_help=True)
app.add_typer(checkpoints_app, name="checkpoints")


@checkpoints_app.command("list")
@friendly
def list_checkpoints(
    analysis: Annotated[str | None, typer.Option(help="Only this analysis id.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=defaults.BIGINT_MAX)] = 50,
) -> None:
    """Newest checkpoints first: agent, progress, failure, whether L1 went to PostgreSQL."""
    if analysis is not None:
        analysis = check_uuid(analysis)
    with OPTIONS.stack() as stack:
        rows = stack.checkpointer.summaries(analysis, limit)
    table = Table(
        "checkpoint",
        "analysis",
        "agent type",
        "time",
        "progress",
        "next",
        "failure",
        "retries",
        "version",
        "L1 in pg",
    )
    for r in rows:
        table.add_row(
            str(r["checkpoint_id"]),
            str(r["analysis_id"])[:8],
            r["agent_type"],
            r["checkpoint_time"].strftime("%Y-%m-%d %H:%M:%S"),
            f"{r['done']} of {r['total']}",
            r["current_subtask"] or "-",
            r["failure_reason"] or "",
            str(r["retry_count"]),
            r["agent_version"],
            "yes" if r["dual"] else "no",
        )
    console.print(table)


@checkpoints_app.command("show")
@friendly
def show(checkpoint_id: str) -> None:
    """One checkpoint in full, as JSON, with a summary of its L1 snapshot."""
    cid = check_uuid(checkpoint_id, "checkpoint_id")
    with OPTIONS.stack() as stack:
        cp = stack.checkpointer.get(cid)
        memory = stack.checkpointer.snapshot_of(cid)
    doc = cp.to_doc()
    if memory is not None:
        doc["l1_snapshot"] = {name: {"type": e.type} for name, e in sorted(memory.items())}
    console.print_json(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode())


@app.command()
@friendly
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go.")] = False,
) -> None:
    """Apply the retention policy: expire over-long pauses, delete what is past retention."""
    with OPTIONS.stack() as stack:
        report = stack.retention.gc(dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    for aid, n in report.deleted.items():
        console.print(f"{verb} {n} checkpoint(s) of analysis {aid}")
    for aid in report.expired:
        console.print(f"{'would expire' if dry_run else 'expired'} paused analysis {aid}")
    console.print(
        f"{verb} {report.total_deleted} checkpoint(s); {len(report.expired)} pause(s) expired"
    )
