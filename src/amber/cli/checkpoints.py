"""``amber checkpoints list|show`` and ``amber gc``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from amber.cli import ids
from amber.cli.app import OPTIONS, app, console, friendly
from amber.cli.ids import uuid_prefix
from amber.cli.output import (
    AnalysisFilter,
    Col,
    JsonFlag,
    Limit,
    limit_rows,
    print_json,
    progress,
    table,
)

checkpoints_app = typer.Typer(help="Inspect checkpoints.", no_args_is_help=True)
app.add_typer(checkpoints_app, name="checkpoints")

_LISTED = (
    "checkpoint_id",
    "analysis_id",
    "agent_type",
    "seq",
    "checkpoint_time",
    "done",
    "total",
    "current_subtask",
    "failure_reason",
    "retry_count",
    "agent_version",
)


@checkpoints_app.command("list")
@friendly
def list_checkpoints(
    analysis: AnalysisFilter = None,
    limit: Limit = 50,
    as_json: JsonFlag = False,
) -> None:
    """Newest checkpoints first: agent, progress, failure, whether L1 went to PostgreSQL."""
    resolve = ids.analysis_filter(analysis)
    with OPTIONS.stack() as stack:
        rows = stack.checkpointer.summaries(resolve(stack), limit_rows(limit))
    docs: list[dict[str, Any]] = [
        {**{k: r[k] for k in _LISTED}, "l1_in_postgresql": bool(r["dual"])} for r in rows
    ]
    for d in docs:
        d["checkpoint_id"], d["analysis_id"] = str(d["checkpoint_id"]), str(d["analysis_id"])
    if as_json:
        print_json(docs)
        return
    table(
        [
            Col("checkpoint", "id"),
            Col("analysis", "id"),
            Col("agent type"),
            Col("time"),
            Col("progress"),
            Col("next"),
            Col("failure", "text"),
            Col("retries"),
            Col("version"),
            Col("L1 in pg"),
        ],
        [
            [
                d["checkpoint_id"],
                d["analysis_id"],
                d["agent_type"],
                d["checkpoint_time"].strftime("%Y-%m-%d %H:%M:%S"),
                f"{d['done']} of {d['total']}",
                d["current_subtask"] or "-",
                d["failure_reason"] or "",
                str(d["retry_count"]),
                d["agent_version"],
                "yes" if d["l1_in_postgresql"] else "no",
            ]
            for d in docs
        ],
    )


@checkpoints_app.command("show")
@friendly
def show(
    checkpoint_id: Annotated[str, typer.Argument(help="A checkpoint id or a unique prefix.")],
    as_json: JsonFlag = False,
) -> None:
    """One checkpoint in full, as JSON, with a summary of its L1 snapshot."""
    uuid_prefix(checkpoint_id, "checkpoint_id")
    with OPTIONS.stack() as stack:
        cid = ids.checkpoint_id(stack, checkpoint_id)
        cp = stack.checkpointer.get(cid)
        memory = stack.checkpointer.snapshot_of(cid)
    doc = cp.to_doc()
    if memory is not None:
        doc["l1_snapshot"] = {name: {"type": e.type} for name, e in sorted(memory.items())}
    if as_json:
        print_json(doc)
        return
    import orjson

    console.print_json(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS, default=str).decode())


@app.command()
@friendly
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Apply the retention policy: expire over-long pauses, delete what is past retention."""
    with OPTIONS.stack() as stack, progress(as_json) as bar:
        task = bar.add_task("retention", total=None)
        report = stack.retention.gc(
            dry_run=dry_run,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if as_json:
        print_json(
            {
                "dry_run": dry_run,
                "deleted": report.deleted,
                "expired": report.expired,
                "total_deleted": report.total_deleted,
            }
        )
        return
    verb = "would delete" if dry_run else "deleted"
    for aid, n in report.deleted.items():
        console.print(f"{verb} {n} checkpoint(s) of analysis {aid}", highlight=False)
    for aid in report.expired:
        console.print(
            f"{'would expire' if dry_run else 'expired'} paused analysis {aid}", highlight=False
        )
    console.print(
        f"{verb} {report.total_deleted} checkpoint(s); {len(report.expired)} pause(s) expired",
        highlight=False,
    )
