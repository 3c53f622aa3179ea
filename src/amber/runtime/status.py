"""One read model of an analysis's status: its progress, liveness and wording, as every
surface shows them (``amber analyses list`` and ``show``, the API, the dashboard).

Pure shaping over the stack's reads: each agent's newest checkpoint, then its kept
result (in that order, see ``_reads``), the lease holder, the open pause."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amber import defaults
from amber.runtime.results import RESULT_KEY as RESULT_STEP
from amber.runtime.reviews import waiting_for_review

if TYPE_CHECKING:
    from amber.runtime.analyses import AnalysisRecord
    from amber.stack import Stack  # read through its public attributes only


QUEUED = "running (queued: no live run holds it)"
"""How every surface says that an analysis waits for a worker (or ``amber resume``)."""


def _progress(
    record: AnalysisRecord, results: dict[str, dict[str, Any]], latest: dict[str, Any]
) -> list[dict[str, Any]]:
    agents = []
    for entry in record.agents:
        kept = results.get(entry["agent_id"])
        cp = latest.get(entry["agent_type"])
        if kept is not None:
            steps = [s for s in kept["steps"] if s != RESULT_STEP]
            done, total, status = len(steps), len(steps), kept["status"]
        elif cp is not None:
            done, total, status = int(cp["done"]), int(cp["total"]), "in progress"
        else:
            done, total, status = 0, len(entry.get("steps") or []), "not started"
        agents.append(
            {
                "agent_type": entry["agent_type"],
                "agent_id": entry["agent_id"],
                "done": done,
                "total": total,
                "progress": f"{done} of {total}",
                "status": status,
            }
        )
    return agents


def no_worker_registers(agent_types: list[str]) -> str:
    """How every surface says an analysis waits for code no live worker has."""
    return "no live worker registers agent " + ", ".join(repr(a) for a in agent_types)


def progress_text(agent: dict[str, Any]) -> str:
    """One agent's progress in words: ``not started``, ``3 of 5``, or its end with what
    it did (``completed, 5 of 5``)."""
    if agent["status"] == "not started":
        return "not started"
    if agent["status"] == "in progress":
        return str(agent["progress"])
    return f"{agent['status']}, {agent['progress']}"


def _reads(
    stack: Stack, record: AnalysisRecord
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each agent type's newest checkpoint, then each agent's kept result. In this order:
    a finish writes the results and purges the checkpoints in one transaction, so an
    agent missing from the first read is always in the second."""
    aid = record.analysis_id
    latest = stack.checkpointer.latest(aid) if record.status not in ("completed", "expired") else {}
    results = {r["agent_id"]: r for r in stack.analyses.results(aid)}
    return latest, results


def _shape(
    stack: Stack,
    record: AnalysisRecord,
    latest: dict[str, dict[str, Any]],
    results: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    aid = record.analysis_id
    pause = stack.analyses.open_pause(aid) if record.status == "paused" else None
    owner = stack.analyses.leases.holder(aid) if record.status == "running" else None
    queued = record.status == "running" and owner is None
    unserved = stack.analyses.unserved(aid) if queued else []
    state = QUEUED if queued else record.status
    if unserved:
        state = "running (waiting: " + no_worker_registers(unserved) + ")"
    return {
        "analysis_id": aid,
        "status": record.status,
        "state": state,
        "queued": queued,
        "unserved": unserved,
        "owner": owner,
        "ticker": record.stock_ticker or None,
        "definition": record.definition,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "agents": _progress(record, results, latest),
        "pause": _pause(stack, aid, pause),
    }


def _pause(stack: Stack, aid: str, pause: dict[str, Any] | None) -> dict[str, Any] | None:
    """The open pause as every surface shows it: reason, since, by, and in words
    (``says``); paused for review, the reviews it waits for (``reviews``: ref, kind)."""
    if pause is None:
        return None
    shown: dict[str, Any] = {
        "reason": pause["reason"],
        "since": pause["paused_at"],
        "by": pause["paused_by"],
        "says": pause["reason"],
        "reviews": [],
    }
    if pause["reason"] == "awaiting_review":
        waiting = stack.reviews.list("pending", aid, 20)
        if waiting:
            shown["says"] = waiting_for_review(waiting)
            shown["reviews"] = [{"ref": r.ref, "kind": r.kind} for r in waiting]
    return shown


def summary(stack: Stack, record: AnalysisRecord) -> dict[str, Any]:
    """One analysis as the list shows it: status, each agent's progress, its open pause
    (reason, since when), and the run holding it (if one is live)."""
    return _shape(stack, record, *_reads(stack, record))


def checkpoints_said(status: str, count: int) -> str:
    """How many checkpoints an agent has, in words: a completed analysis's were purged
    when it completed (its results are kept), which a bare 0 would hide."""
    if count == 0 and status == "completed":
        return "purged at completion"
    if count == 0:
        return "none yet"
    return str(count)


def detail(stack: Stack, record: AnalysisRecord) -> dict[str, Any]:
    """One analysis in full: the summary, each agent's result, steps and checkpoints,
    the timeline, and every pause with its recovery report."""
    aid = record.analysis_id
    checkpoints: dict[str, list[dict[str, Any]]] = {}
    for row in stack.checkpointer.summaries(aid, limit=defaults.BIGINT_MAX):
        checkpoints.setdefault(row["agent_type"], []).append(checkpoint_row(row))
    latest, results = _reads(stack, record)
    shown = _shape(stack, record, latest, results)
    for agent in shown["agents"]:
        kept = results.get(agent["agent_id"])
        newest = latest.get(agent["agent_type"])
        rows = checkpoints.get(agent["agent_type"], [])
        rows.reverse()  # oldest first: a timeline
        agent["checkpoints"] = rows
        agent["checkpoints_said"] = checkpoints_said(record.status, len(rows))
        agent["result"] = kept["result"] if kept else None
        agent["finished_at"] = kept["finished_at"] if kept else None
        if kept is not None:
            agent["steps"] = [s for s in kept["steps"] if s != RESULT_STEP]
        else:
            agent["steps"] = list(newest["steps"]) if newest else []
    shown["input"] = record.input
    shown["preserve"] = record.preserve
    shown["timeline"] = stack.analyses.timeline(aid)
    shown["pauses"] = [pause_row(p) for p in stack.analyses.pauses(aid)]
    shown["in_doubt"] = [i.as_dict() for i in stack.intents.in_doubt(aid, 100)]
    shown["reviews"] = [r.as_dict() for r in stack.reviews.list(None, aid, 100)]
    return shown


def checkpoint_row(row: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint summary as the API shows it."""
    return {
        "checkpoint_id": str(row["checkpoint_id"]),
        "seq": row["seq"],
        "at": row["checkpoint_time"],
        "progress_pct": row["progress_pct"],
        "current_subtask": "its result"
        if row["current_subtask"] == RESULT_STEP
        else row["current_subtask"],
        "done": row["done"],
        "total": row["total"],
        "writer": row["writer"],
        "failure_reason": row["failure_reason"],
        "retry_count": row["retry_count"],
        "version": row["agent_version"],
        "snapshot_in_postgresql": row["dual"],
    }


def pause_row(row: dict[str, Any]) -> dict[str, Any]:
    """A pause record with its recovery report as a list: per agent, which tier its
    memory came back from, how long it took, and whether it was verified."""
    report = row.get("resume_report") or {}
    recoveries = [
        {
            "agent_type": agent_type,
            "path": r.get("path"),
            "ms": r.get("ms"),
            "keys": r.get("keys"),
            "verified": r.get("verified"),
            "replayed": r.get("replayed"),
            "reason": r.get("reason") or None,
        }
        for agent_type, r in sorted(report.items())
        if isinstance(r, dict)
    ]
    return {
        "reason": row["reason"],
        "paused_by": row["paused_by"],
        "paused_at": row["paused_at"],
        "frozen_at": row["frozen_at"],
        "resumed_at": row["resumed_at"],
        "resumed_by": row["resumed_by"],
        "error": row["error"],
        "agents": row["agents"],
        "recoveries": recoveries,
    }
