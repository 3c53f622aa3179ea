"""The sessions module's reviews: amber's one review queue, in PostgreSQL.

A ``ReviewItem`` saved here is stored beside the reviews analyses wait for, under the
module's key prefix (its scope), until its ``expires_at``. So it shows in
``amber reviews list``, ``/api/reviews`` and the dashboard's queue, and is decided once,
there or with ``decide``. The PostgreSQL pool is opened on the first review call, so
code using only sessions and tasks needs no PostgreSQL.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amber.engines.connect import open_pg
from amber.engines.embedded import ensure_embedded
from amber.errors import ValidationError
from amber.keys import check_id
from amber.persistence.models import ReviewItem, Verdict, parse

if TYPE_CHECKING:
    from collections.abc import Mapping

    from psycopg_pool import ConnectionPool

    from amber.runtime.reviews import Review, Reviews

POOL_MAX = 4
"""Connections the module's review calls hold at most."""


def _item(review: Review) -> ReviewItem:
    doc = review.decision or {}
    assert review.deadline is not None and review.task_id is not None
    return ReviewItem(
        review_id=review.review_id,
        task_id=review.task_id,
        confidence=review.confidence if review.confidence is not None else 0.0,
        expires_at=review.deadline,
        kind=review.kind,
        payload=review.payload,
        decision=None if review.status == "pending" else review.status,  # type: ignore[arg-type]
        decided_by=review.decided_by,
        decided_at=review.decided_at,
        comment=doc.get("comment"),
    )


class TaskReviews:
    """Reviews of tasks under one key prefix, kept as amber's reviews (blocking calls).

    ``database_url`` None means amber's embedded PostgreSQL under ``data_dir``.
    """

    def __init__(
        self,
        scope: str,
        database_url: str | None,
        data_dir: Path,
        connect_timeout: float,
        command_timeout: float,
    ) -> None:
        self.scope = scope
        self._url = database_url
        self._data_dir = data_dir
        self._timeouts = (connect_timeout, command_timeout)
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._store: Reviews | None = None

    def store(self) -> Reviews:
        """amber's review store, on a pool opened (and the schema migrated) on first use."""
        with self._lock:
            if self._store is None:
                from amber.runtime.reviews import Reviews  # the engine's store, loaded late
                from amber.schema.migrations import migrate

                url = self._url or ensure_embedded(self._data_dir, redis=False)["postgres"]
                connect, command = self._timeouts
                self._pool = open_pg(url, connect, POOL_MAX, command)
                migrate(self._pool)
                self._store = Reviews(self._pool)
            return self._store

    def save(self, review: ReviewItem | Mapping[str, Any]) -> ReviewItem:
        """Store a review until its ``expires_at``; see ``Core``'s contract in the docs."""
        checked = parse(ReviewItem, review)
        if checked.expired():
            raise ValidationError(
                f"invalid review: expires_at: {checked.expires_at.isoformat()} has passed",
                field="expires_at",
                review_id=checked.review_id,
            )
        decided = checked.decision
        fields = {
            "review_id": checked.review_id,
            "task_id": checked.task_id,
            "confidence": checked.confidence,
            "deadline": checked.expires_at,
            "kind": checked.kind,
            "payload": checked.payload,
            "status": decided or "pending",
            "decision": None
            if decided is None
            else {
                "outcome": decided,
                "by": checked.decided_by,
                "decided_at": checked.decided_at.isoformat() if checked.decided_at else None,
                "comment": checked.comment,
                "data": None,
                "expired": decided == "expired",
            },
            "decided_by": checked.decided_by,
            "decided_at": checked.decided_at,
        }
        return _item(self.store().put_task_review(self.scope, fields))

    def get(self, review_id: str) -> ReviewItem | None:
        """The stored review, decided or not; None if there is none or it has expired."""
        found = self.store().find(self.scope, check_id(review_id, "review_id"))
        return None if found is None else _item(found)

    def list(self, limit: int = 0) -> list[ReviewItem]:
        """Pending reviews, soonest ``expires_at`` first (``limit`` 0: all)."""
        rows = self.store().list("pending", None, limit or None, scope=self.scope)
        return [_item(r) for r in rows]  # past expires_at: left out by the query

    def remove(self, review_id: str) -> bool:
        """Remove a review; False if there was none."""
        return self.store().remove_task_review(self.scope, check_id(review_id, "review_id"))

    def decide(
        self, review_id: str, decision: str, by: str, comment: str | None = None
    ) -> ReviewItem:
        """Record ``decision`` (``approved`` or ``rejected``) by ``by``, once."""
        verdict = parse(Verdict, {"decision": decision, "by": by, "comment": comment})
        ref = f"{self.scope}:{check_id(review_id, 'review_id')}"
        # the models checked every text is one PostgreSQL can hold
        return _item(self.store().decide(ref, verdict.decision, verdict.by, verdict.comment))

    def close(self) -> None:
        """Close the pool, if a review call opened one."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
            self._pool = self._store = None
