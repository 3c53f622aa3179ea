"""Reviews: a step that waits for a person's decision, durably.

``ctx.wait_for_review(kind, payload, deadline=..., on_deadline="reject")`` creates a
review (once per step key) and pauses the analysis until it is decided. ``approve`` and
``reject`` decide it exactly once, in one transaction with the resume of the analysis
(when no other review of it is pending): the analysis is queued again, and the waiting
step gets the decision as its recorded result. A passed deadline decides it as the step
declared (``expired``, with the declared outcome).
"""

from __future__ import annotations

import builtins
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from amber import codec, defaults, observe
from amber.errors import InvalidValue, ReviewAlreadyDecided, ReviewNotFound, fenced
from amber.keys import check_id, check_reason, check_text, check_uuid
from amber.runtime import sql
from amber.runtime.decided import note_and_resume
from amber.schema import sql as core_sql

OUTCOMES = ("approved", "rejected")
"""What a decision can be; ``on_deadline`` names one of them as ``approve``/``reject``."""

ON_DEADLINE = {"approve": "approved", "reject": "rejected"}

REVIEW_STATUSES = ("pending", "approved", "rejected", "expired")


@dataclass(frozen=True)
class Decision:
    """What a waiting step receives: the outcome and who decided it."""

    outcome: str
    """``approved`` or ``rejected``."""
    by: str
    decided_at: str
    comment: str | None = None
    data: Any = None
    expired: bool = False
    """No one decided before the deadline: ``outcome`` is the step's ``on_deadline``."""

    @property
    def approved(self) -> bool:
        """The outcome is ``approved``."""
        return self.outcome == "approved"

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (what the step records)."""
        return {
            "outcome": self.outcome,
            "by": self.by,
            "decided_at": self.decided_at,
            "comment": self.comment,
            "data": self.data,
            "expired": self.expired,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Decision:
        """Inverse of :meth:`as_dict`."""
        return cls(
            doc["outcome"],
            doc["by"],
            doc["decided_at"],
            doc.get("comment"),
            doc.get("data"),
            bool(doc.get("expired")),
        )


@dataclass(frozen=True)
class Review:
    """One review as stored: an analysis's (``scope`` empty) or a task's."""

    review_id: str
    analysis_id: str | None
    """The analysis a waiting step paused; None for a task's review."""
    agent_id: str | None
    agent_type: str | None
    step_key: str | None
    kind: str | None
    payload: Any
    deadline: datetime | None
    """A task's review is gone once this has passed (its ``expires_at``)."""
    on_deadline: str | None
    """``approve`` or ``reject`` for an analysis's review; None for a task's."""
    status: str
    """``pending``, ``approved``, ``rejected`` or ``expired``."""
    decision: dict[str, Any] | None
    decided_by: str | None
    decided_at: datetime | None
    created_at: datetime
    scope: str = ""
    """The sessions module's key prefix a task's review was saved under; empty otherwise."""
    task_id: str | None = None
    confidence: float | None = None

    @property
    def ref(self) -> str:
        """How the CLI, the API and the dashboard name it: the id, ``scope:id`` for a task's."""
        return f"{self.scope}:{self.review_id}" if self.scope else self.review_id

    def due(self, now: datetime | None = None) -> bool:
        """Pending past its deadline."""
        return (
            self.status == "pending"
            and self.deadline is not None
            and self.deadline <= (now or datetime.now(UTC))
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "review_id": self.review_id,
            "ref": self.ref,
            "scope": self.scope,
            "analysis_id": self.analysis_id,
            "agent_type": self.agent_type,
            "agent_id": self.agent_id,
            "step": self.step_key,
            "task_id": self.task_id,
            "confidence": self.confidence,
            "kind": self.kind,
            "payload": self.payload,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "on_deadline": self.on_deadline,
            "status": self.status,
            "decision": self.decision,
            "created_at": self.created_at.isoformat(),
        }


def _review(row: tuple[Any, ...]) -> Review:
    return Review(row[0], None if row[1] is None else str(row[1]), *row[2:])


def split_ref(ref: object) -> tuple[str | None, str]:
    """``(scope, review_id)`` of a review's reference; scope None when the id came alone."""
    if isinstance(ref, uuid.UUID):
        return None, str(ref)
    if isinstance(ref, str) and ":" in ref:
        scope, _, rid = ref.partition(":")
        return check_id(scope, "scope"), check_id(rid, "review_id")
    return None, check_id(ref, "review_id")


def waiting_for_review(reviews: builtins.list[Review]) -> str:
    """How every surface says an analysis waits for people: ``waiting for review R (kind)``
    (``reviews R1, R2`` when several), and how to decide."""
    refs = ", ".join(f"{r.ref} ({r.kind})" for r in reviews)
    first = reviews[0].ref
    noun = "review" if len(reviews) == 1 else "reviews"
    return f"waiting for {noun} {refs}: amber reviews approve {first} (or reject)"


def deadline_at(deadline: object) -> datetime | None:
    """A deadline given as seconds from now, a ``timedelta`` or an aware ``datetime``."""
    if deadline is None:
        return None
    if isinstance(deadline, datetime):
        if deadline.tzinfo is None:
            raise InvalidValue("a deadline datetime must carry a timezone", field="deadline")
        return deadline
    if isinstance(deadline, timedelta):
        return datetime.now(UTC) + deadline
    if isinstance(deadline, int | float) and not isinstance(deadline, bool):
        if not 0 <= deadline <= 100 * 365 * 86_400:
            raise InvalidValue(
                "a deadline in seconds must be from 0 to a century", field="deadline"
            )
        return datetime.now(UTC) + timedelta(seconds=deadline)
    raise InvalidValue(
        "deadline must be seconds, a timedelta or an aware datetime", field="deadline"
    )


class Reviews:
    """Reviews in PostgreSQL: opened by waiting steps, decided once by people or deadlines."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pg = pool

    def open(
        self,
        analysis_id: str,
        agent_id: str,
        agent_type: str,
        key: str,
        kind: str,
        payload: Any,
        deadline: datetime | None,
        on_deadline: str,
        owner: str | None = None,
    ) -> Review:
        """The review step ``key`` waits for: created the first time, found after that.

        With ``owner`` (the run waiting) the statement is fenced by its lease: ``Fenced``,
        and nothing written, once the run no longer holds the analysis."""
        kind = check_id(kind, "kind")
        if on_deadline not in ON_DEADLINE:
            raise InvalidValue("on_deadline must be 'approve' or 'reject'", field="on_deadline")
        params = {
            "review_id": str(uuid.uuid4()),
            "analysis_id": analysis_id,
            "agent_id": agent_id,
            "agent_type": agent_type,
            "key": key,
            "kind": kind,
            "payload": Jsonb(payload),
            "deadline": deadline,
            "on_deadline": on_deadline,
            "owner": owner,
        }
        with self.pg.connection() as conn:
            row = conn.execute(sql.OPEN_REVIEW, params).fetchone()
        if row is None:
            assert owner is not None
            raise fenced(analysis_id, owner, f"open review {key!r}")
        return _review(row)

    def get(self, review_id: object) -> Review:
        """One review by its reference (the id, or ``scope:id`` for a task's review);
        ``ReviewNotFound`` if there is none, ``InvalidValue`` if a bare id is in several
        scopes."""
        scope, rid = self._key(review_id)
        found = self.find(scope, rid)
        if found is None:
            raise ReviewNotFound("no review with this id", review_id=rid)
        return found

    def find(self, scope: str, review_id: str) -> Review | None:
        """The review ``review_id`` of ``scope``, or None (a task's past its deadline too)."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.REVIEW, (scope, review_id)).fetchone()
        return None if row is None else _review(row)

    def _key(self, ref: object) -> tuple[str, str]:
        scope, rid = split_ref(ref)
        if scope is not None:
            return scope, rid
        with self.pg.connection() as conn:
            scopes = [r[0] for r in conn.execute(sql.SCOPES_OF, (rid,)).fetchall()]
        if not scopes:
            raise ReviewNotFound("no review with this id", review_id=rid)
        if len(scopes) > 1:
            refs = ", ".join(f"{s}:{rid}" if s else rid for s in scopes)
            raise InvalidValue(
                f"several reviews have the id {rid!r}: name one of {refs}",
                field="review_id",
                value=rid,
            )
        return scopes[0], rid

    def list(
        self,
        status: str | None = "pending",
        analysis_id: object = None,
        limit: int | None = 100,
        scope: str | None = None,
    ) -> builtins.list[Review]:
        """Reviews, by default the pending ones: oldest first; in one ``scope`` (a task's
        reviews under a key prefix) soonest deadline first. ``limit`` None: all."""
        if status is not None and status not in REVIEW_STATUSES:
            raise InvalidValue(
                f"status must be one of {', '.join(REVIEW_STATUSES)}", field="status", value=status
            )
        aid = None if analysis_id is None else check_uuid(analysis_id)
        if scope is not None:
            scope = check_id(scope, "scope")
        params = {"status": status, "aid": aid, "limit": limit, "scope": scope}
        with self.pg.connection() as conn:
            rows = conn.execute(sql.REVIEWS, params).fetchall()
        return [_review(r) for r in rows]

    def count(self, status: str = "pending") -> int:
        """How many reviews have ``status``."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.COUNT_REVIEWS, (status,)).fetchone()
        return int(row[0]) if row else 0

    def ids_like(self, prefix: str, limit: int = 5) -> builtins.list[str]:
        """References of reviews (the id, or ``scope:id``) that start with ``prefix``."""
        pattern = core_sql.like_prefix(prefix)
        with self.pg.connection() as conn:
            rows = conn.execute(sql.REVIEW_IDS_LIKE, (pattern, pattern, limit))
            return [str(r[0]) for r in rows.fetchall()]

    def put_task_review(self, scope: str, fields: dict[str, Any]) -> Review:
        """Store a task's review under ``scope`` as given (the sessions module's
        ``save_review``: a second save replaces the first). ``fields`` are the columns
        ``review_id task_id confidence deadline kind payload status decision decided_by
        decided_at``, checked by the caller."""
        params = {**fields, "scope": scope, "payload": Jsonb(fields["payload"])}
        if fields["decision"] is not None:
            params["decision"] = Jsonb(fields["decision"])
        with self.pg.connection() as conn:
            conn.execute(sql.PURGE_TASK_REVIEWS)
            row = conn.execute(sql.PUT_TASK_REVIEW, params).fetchone()
        assert row is not None
        return _review(row)

    def remove_task_review(self, scope: str, review_id: str) -> bool:
        """Remove a task's review; False if there was none."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.REMOVE_TASK_REVIEW, (scope, review_id)).fetchone()
        return row is not None

    def approve(
        self, review_id: object, by: str, comment: str | None = None, data: Any = None
    ) -> Review:
        """Approve a pending review (once) and queue its analysis again."""
        return self.decide(review_id, "approved", by, comment, data)

    def reject(
        self, review_id: object, by: str, comment: str | None = None, data: Any = None
    ) -> Review:
        """Reject a pending review (once) and queue its analysis again."""
        return self.decide(review_id, "rejected", by, comment, data)

    def decide(
        self,
        review_id: object,
        outcome: str,
        by: str,
        comment: str | None = None,
        data: Any = None,
        expired: bool = False,
    ) -> Review:
        """Record the decision once; ``ReviewAlreadyDecided`` if one is recorded already.

        In the same transaction, the analysis is resumed (queued for a worker) when it
        is paused for review and no other review of it is pending.
        """
        if outcome not in OUTCOMES:
            raise InvalidValue("a decision is 'approved' or 'rejected'", field="decision")
        by = check_reason(by, "by")
        if comment is not None:
            comment = check_text(comment, "comment", defaults.COMMENT_MAX_LEN, allow_empty=True)
        codec.json_value(data, "data", defaults.DOCUMENT_MAX_BYTES)
        scope, rid = self._key(review_id)
        decision = Decision(
            outcome, by, datetime.now(UTC).isoformat(), comment, data, expired
        ).as_dict()
        params = {
            "status": "expired" if expired else outcome,
            "decision": Jsonb(decision),
            "by": by,
            "review_id": rid,
            "scope": scope,
        }
        with self.pg.connection() as conn, conn.transaction():
            conn.execute(sql.LOCK_REVIEWED_ANALYSIS, (scope, rid))
            row = conn.execute(sql.DECIDE, params).fetchone()
            review = None if row is None else _review(row)
            if review is not None and review.analysis_id is not None:
                detail = {"review_id": rid, "kind": review.kind, "status": review.status}
                note_and_resume(
                    conn,
                    review.analysis_id,
                    "review_decided",
                    detail,
                    by,
                    sql.RESUME_AFTER_REVIEW,
                    "awaiting_review",
                )
        if row is None:
            current = self.find(scope, rid)
            if current is None:  # a task's review whose deadline passed meanwhile
                raise ReviewNotFound("no review with this id", review_id=rid)
            raise ReviewAlreadyDecided(
                f"review is already {current.status}; its decision stands",
                review_id=rid,
                decision=current.status,
                decided_by=current.decided_by,
            )
        assert review is not None
        return review

    def pause_for(self, analysis_id: str, by: str) -> bool:
        """Pause a running analysis for review (with its pause record, in one transaction)
        unless none of its reviews is pending any more; whether it paused."""
        with self.pg.connection() as conn, conn.transaction():
            conn.execute(sql.LOCK_ANALYSIS, (analysis_id,))
            if conn.execute(sql.PAUSE_FOR_REVIEW, (analysis_id,) * 2).fetchone() is None:
                return False
            conn.execute(core_sql.INSERT_PAUSE, (analysis_id, "awaiting_review", by))
            conn.execute(
                core_sql.ADD_EVENT,
                (analysis_id, "paused", by, Jsonb({"reason": "awaiting_review"})),
            )
        observe.emit(observe.PAUSE, reason="awaiting_review")
        return True

    def expire_due(self, limit: int = 100) -> builtins.list[Review]:
        """Decide every analysis's pending review past its deadline as its step declared
        (and drop the tasks' reviews past theirs)."""
        with self.pg.connection() as conn:
            conn.execute(sql.PURGE_TASK_REVIEWS)
            due = [str(r[0]) for r in conn.execute(sql.DUE_REVIEWS, (limit,)).fetchall()]
        decided = []
        for rid in due:
            try:
                decided.append(self.expire(rid))
            except ReviewAlreadyDecided:
                continue  # decided by a person (or another worker) meanwhile
        return decided

    def expire(self, review_id: str) -> Review:
        """Decide one review as its deadline says (``ReviewAlreadyDecided`` if decided)."""
        review = self.get(review_id)
        if review.on_deadline is None:
            raise InvalidValue("a task's review has no deadline decision", field="review_id")
        return self.decide(
            review.ref, ON_DEADLINE[review.on_deadline], "deadline", None, None, expired=True
        )
