"""What a person's decision does to the analysis it unblocks, in the decision's transaction:
the timeline records it, and the analysis, paused for it, is queued again once nothing
else of the same kind holds it (a review decided, a step in doubt resolved)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from amber import observe
from amber.schema import sql as core_sql


def note_and_resume(
    conn: psycopg.Connection[Any],
    analysis_id: str,
    event: str,
    detail: dict[str, Any],
    by: str,
    resume: str,
    reason: str,
) -> bool:
    """Record ``event`` on the analysis's timeline; run ``resume`` (one of the
    ``RESUME_AFTER_*`` statements) and, when it queued the analysis again, close its
    pause and record ``resumed``. Whether it was queued again."""
    resumed = conn.execute(resume, {"aid": analysis_id}).fetchone() is not None
    conn.execute(core_sql.ADD_EVENT, (analysis_id, event, by, Jsonb(detail)))
    if resumed:
        conn.execute(core_sql.RESUME_PAUSE, (by, Jsonb({}), analysis_id))
        conn.execute(core_sql.ADD_EVENT, (analysis_id, "resumed", by, None))
        observe.emit(observe.RESUME, reason=reason)
    return resumed
