"""The JSON API of ``amber serve`` (its OpenAPI schema is at ``/api/openapi.json``).

Every handler is a thin call into the public Python API of the ``Stack`` and the loaded
``App``. A resume recovers the agents' memory here and leaves the analysis ``running``
and queued: a worker of the app (``amber worker``, or ``amber serve --worker``) runs it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from amber.errors import InvalidValue, NotSupported
from amber.keys import check_reason, check_uuid
from amber.runtime.pause import PauseManager
from amber.web import views

if TYPE_CHECKING:
    from amber.persistence import SyncPersistenceManager
    from amber.runtime.app import App
    from amber.stack import Stack

STATUSES = ("running", "paused", "completed", "failed", "expired")
PAGE_MAX = 500
OFFSET_MAX = 100_000


@dataclass
class Context:
    """What the handlers work on: the stack, the app, and the persistence module."""

    stack: Stack
    app: App
    persistence: SyncPersistenceManager | None
    by: str = "web"
    """Who the timeline names for changes made through the server."""

    def pauses(self) -> PauseManager:
        """A pause manager whose coordinator runs (and recovers) this app's agents."""
        return PauseManager(self.stack.analyses, self.app.coordinator(self.stack))


def ctx(request: Request) -> Context:
    """The server's context."""
    context: Context = request.app.state.context
    return context


router = APIRouter(prefix="/api")


class Submit(BaseModel):
    """An analysis to queue: a definition of the loaded app, its input and ticker."""

    definition: str = Field(max_length=200)
    input: dict[str, Any] | None = None
    ticker: str | None = Field(default=None, max_length=64)


class Pause(BaseModel):
    """Why the analysis pauses."""

    reason: str = Field(default="manual", max_length=1000)


class Decide(BaseModel):
    """A note and data for a review decision."""

    comment: str | None = Field(default=None, max_length=10_000)
    data: Any = None


class Resolve(BaseModel):
    """Run an in-doubt step again, or skip it recording ``result`` as its result."""

    action: Literal["rerun", "skip"]
    result: Any = None


# -- the app ----------------------------------------------------------------------------
@router.get("/app", tags=["app"])
def app_info(request: Request) -> dict[str, Any]:
    """The loaded app: its name, analysis definitions and agents."""
    app = ctx(request).app
    return {
        "name": app.name,
        "definitions": {k: list(v) for k, v in sorted(app.definitions.items())},
        "agents": app.names(),
    }


# -- analyses ---------------------------------------------------------------------------
@router.get("/analyses", tags=["analyses"])
def list_analyses(
    request: Request,
    status: Annotated[str | None, Query(description="Only analyses in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 50,
    offset: Annotated[int, Query(ge=0, le=OFFSET_MAX)] = 0,
) -> dict[str, Any]:
    """Analyses, newest first, a page at a time, each with its agents' progress."""
    if status is not None and status not in STATUSES:
        raise InvalidValue(f"status must be one of {', '.join(STATUSES)}", field="status")
    stack = ctx(request).stack
    rows = stack.analyses.list(status, offset + limit + 1)[offset:]
    items = [views.summary(stack, r) for r in rows[:limit]]
    return {"items": items, "offset": offset, "limit": limit, "more": len(rows) > limit}


@router.post("/analyses", status_code=201, tags=["analyses"])
def submit(request: Request, body: Submit) -> dict[str, Any]:
    """Queue an analysis of the loaded app (a worker runs it)."""
    c = ctx(request)
    aid = c.app.submit(c.stack, body.definition, body.input, ticker=body.ticker, by=c.by)
    return {"analysis_id": aid, "status": "running", "queued": True}


@router.get("/analyses/{analysis_id}", tags=["analyses"])
def show(request: Request, analysis_id: str) -> dict[str, Any]:
    """One analysis: results, steps, checkpoints, timeline, pauses and recoveries."""
    stack = ctx(request).stack
    return views.detail(stack, stack.analyses.get(check_uuid(analysis_id)))


@router.get("/analyses/{analysis_id}/checkpoints", tags=["analyses"])
def checkpoints(request: Request, analysis_id: str) -> list[dict[str, Any]]:
    """The analysis's checkpoints, newest first."""
    rows = ctx(request).stack.checkpointer.summaries(check_uuid(analysis_id), limit=10_000)
    return [{"agent_type": r["agent_type"], **views.checkpoint_row(r)} for r in rows]


@router.get("/analyses/{analysis_id}/recoveries", tags=["analyses"])
def recoveries(request: Request, analysis_id: str) -> list[dict[str, Any]]:
    """Every pause of the analysis with its recovery report (tier, verified, time)."""
    stack = ctx(request).stack
    return [views.pause_row(p) for p in stack.analyses.pauses(check_uuid(analysis_id))]


@router.post("/analyses/{analysis_id}/pause", tags=["analyses"])
def pause(request: Request, analysis_id: str, body: Pause) -> dict[str, Any]:
    """Pause a running analysis (its runner freezes it at its next step boundary)."""
    c = ctx(request)
    report = c.pauses().pause(check_uuid(analysis_id), check_reason(body.reason), c.by)
    return {
        "analysis_id": report.analysis_id,
        "reason": report.reason,
        "already_paused": report.already_paused,
        "pending": report.pending,
        "message": report.message,
    }


@router.post("/analyses/{analysis_id}/resume", tags=["analyses"])
def resume(request: Request, analysis_id: str) -> dict[str, Any]:
    """Recover the agents' memory and queue the analysis for a worker of the app."""
    c = ctx(request)
    report = c.pauses().resume(check_uuid(analysis_id), c.by, run=False)
    return {
        "analysis_id": report.analysis_id,
        "resumed": report.resumed,
        "message": report.message,
        "recovery": {t: asdict(r) for t, r in report.recovery.items()},
    }


@router.post("/analyses/{analysis_id}/retry", tags=["analyses"])
def retry(request: Request, analysis_id: str) -> dict[str, Any]:
    """Queue a failed analysis again: it continues from its last checkpoints."""
    c = ctx(request)
    aid = check_uuid(analysis_id)
    c.stack.analyses.retry(aid, c.by)
    return {"analysis_id": aid, "status": "running", "queued": True}


# -- checkpoints ------------------------------------------------------------------------
@router.get("/checkpoints/{checkpoint_id}", tags=["agents"])
def checkpoint(request: Request, checkpoint_id: str) -> dict[str, Any]:
    """One checkpoint: the agent's state at a step boundary."""
    cp = ctx(request).stack.checkpointer.get(check_uuid(checkpoint_id, "checkpoint_id"))
    return cp.to_doc()


# -- steps ------------------------------------------------------------------------------
@router.get("/steps/in-doubt", tags=["steps"])
def in_doubt(
    request: Request,
    analysis: str | None = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
) -> list[dict[str, Any]]:
    """At-most-once steps that started and never recorded (their run died)."""
    aid = check_uuid(analysis) if analysis else None
    return [i.as_dict() for i in ctx(request).stack.intents.in_doubt(aid, limit)]


@router.post("/steps/{step_id}/resolve", tags=["steps"])
def resolve(request: Request, step_id: str, body: Resolve) -> dict[str, Any]:
    """Decide an in-doubt step once; the analysis continues when it is resumed."""
    c = ctx(request)
    rerun = body.action == "rerun"
    if rerun and body.result is not None:
        raise InvalidValue("result goes with skip, not rerun", field="result")
    intent = c.stack.intents.resolve(step_id, rerun, body.result, c.by)
    return intent.as_dict()


# -- reviews ----------------------------------------------------------------------------
@router.get("/reviews", tags=["reviews"])
def reviews(
    request: Request,
    status: str | None = "pending",
    analysis: str | None = None,
    scope: str | None = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
) -> list[dict[str, Any]]:
    """The one review queue: reviews analyses wait for and the sessions module's reviews of
    tasks (``status=`` pending, approved, rejected, expired, or empty for all; ``scope=``
    one key prefix's task reviews). Each is decided by its ``ref``."""
    aid = check_uuid(analysis) if analysis else None
    found = ctx(request).stack.reviews.list(status or None, aid, limit, scope=scope)
    return [r.as_dict() for r in found]


def _decide(request: Request, review_id: str, outcome: str, body: Decide) -> dict[str, Any]:
    c = ctx(request)
    review = c.stack.reviews.decide(review_id, outcome, c.by, body.comment, body.data)
    return review.as_dict()


@router.post("/reviews/{review_id}/approve", tags=["reviews"])
def approve(request: Request, review_id: str, body: Decide) -> dict[str, Any]:
    """Approve a pending review (once): an analysis waiting for it is queued again."""
    return _decide(request, review_id, "approved", body)


@router.post("/reviews/{review_id}/reject", tags=["reviews"])
def reject(request: Request, review_id: str, body: Decide) -> dict[str, Any]:
    """Reject a pending review (once): an analysis waiting for it is queued again."""
    return _decide(request, review_id, "rejected", body)


# -- the persistence module: sessions and tasks --------------------------------------------
def _persistence(request: Request) -> SyncPersistenceManager:
    pm = ctx(request).persistence
    if pm is None:
        raise NotSupported("sessions and tasks need one Redis server or Sentinel, not a cluster")
    return pm


@router.get("/sessions", tags=["sessions"])
def sessions(
    request: Request, limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100
) -> list[dict[str, Any]]:
    """Live sessions, most recently saved first."""
    return [s.model_dump(mode="json") for s in _persistence(request).list_sessions(limit)]


@router.get("/sessions/{session_id}", tags=["sessions"])
def session(request: Request, session_id: str) -> dict[str, Any]:
    """One session and the tasks still queued in it."""
    from amber.errors import SessionNotFoundError

    pm = _persistence(request)
    found = pm.get_session(session_id)
    if found is None:
        raise SessionNotFoundError("no such session", session_id=session_id)
    tasks = pm.list_tasks(session_id)
    return {
        "session": found.model_dump(mode="json"),
        "tasks": [t.model_dump(mode="json") for t in tasks],
    }
