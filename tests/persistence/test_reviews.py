"""The persistence module's reviews: amber's reviews in PostgreSQL, under the module's
prefix; stored until expires_at, then missing; decided once, here or in the one queue."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import amber
from amber import AmberError, NotFound
from amber.persistence import (
    PersistenceManager,
    ReviewAlreadyDecided,
    ReviewItem,
    ReviewNotFound,
    ValidationError,
)

from ..conftest import Engines

HOURS_2 = timedelta(hours=2)


def review(rid: str, expires_in: timedelta = HOURS_2, **change: object) -> dict[str, object]:
    expires_at = (datetime.now(UTC) + expires_in).isoformat()
    return {
        "review_id": rid,
        "task_id": "task_xyz789",
        "confidence": 0.75,
        "expires_at": expires_at,
        **change,
    }


@pytest.fixture
def pg(engines: Engines) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(engines.database_url, autocommit=True) as conn:
        yield conn


def rows(pg: psycopg.Connection[tuple[object, ...]], scope: str) -> list[tuple[object, ...]]:
    """Every stored review of ``scope``, as (review_id, status), expired ones too."""
    return pg.execute(
        "SELECT review_id, status FROM reviews WHERE scope = %s ORDER BY review_id", (scope,)
    ).fetchall()


def age(pg: psycopg.Connection[tuple[object, ...]], scope: str, rid: str) -> None:
    """Move a review's expires_at just into the past (the row stays)."""
    pg.execute(
        "UPDATE reviews SET deadline = NOW() - INTERVAL '1 second' WHERE scope = %s"
        " AND review_id = %s",
        (scope, rid),
    )


async def test_save_then_get(pm: PersistenceManager) -> None:
    stored = await pm.save_review(review("r1"))
    got = await pm.get_review("r1")
    assert got == stored and isinstance(got, ReviewItem)
    assert got.confidence == 0.75
    assert await pm.get_review("nothing") is None


async def test_expires_at_and_its_24h_default_are_kept(pm: PersistenceManager) -> None:
    stored = await pm.save_review(review("r1", timedelta(hours=2)))
    got = await pm.get_review("r1")
    assert got is not None and got.expires_at == stored.expires_at
    await pm.save_review({"review_id": "r2", "task_id": "t1", "confidence": 0.5})
    default = await pm.get_review("r2")
    assert default is not None
    left = (default.expires_at - datetime.now(UTC)).total_seconds()
    assert 24 * 3600 - 60 < left <= 24 * 3600


async def test_a_review_past_expires_at_is_missing_even_if_its_row_is_there(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    await pm.save_review(review("r1"))
    age(pg, prefix, "r1")
    assert rows(pg, prefix) == [("r1", "pending")]
    assert await pm.get_review("r1") is None
    assert await pm.list_reviews() == []
    assert await pm.remove_review("r1") is False


async def test_an_already_expired_review_is_refused(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    with pytest.raises(ValidationError, match="expires_at") as info:
        await pm.save_review(review("r1", timedelta(seconds=-1)))
    assert info.value.field == "expires_at"  # type: ignore[attr-defined]
    assert rows(pg, prefix) == []


async def test_invalid_reviews_name_the_field_and_write_nothing(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    for change, field in [
        ({"confidence": 1.01}, "confidence"),
        ({"review_id": "r:1"}, "review_id"),
        ({"expires_at": "2026-02-07 21:00"}, "expires_at"),
        ({"payload": {"text": "nul\x00"}}, "payload"),
    ]:
        with pytest.raises(ValidationError) as info:
            await pm.save_review(review("r1", **change))
        assert info.value.field == field  # type: ignore[attr-defined]
    assert rows(pg, prefix) == []


async def test_list_soonest_first_and_remove(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    assert await pm.list_reviews() == []
    for rid, hours in (("late", 5), ("soon", 1), ("mid", 3)):
        await pm.save_review(review(rid, timedelta(hours=hours)))
    assert [r.review_id for r in await pm.list_reviews()] == ["soon", "mid", "late"]
    assert [r.review_id for r in await pm.list_reviews(limit=1)] == ["soon"]
    assert await pm.remove_review("mid") is True
    assert await pm.remove_review("mid") is False
    assert await pm.get_review("mid") is None
    age(pg, prefix, "late")
    assert [r.review_id for r in await pm.list_reviews()] == ["soon"]


async def test_saving_again_replaces_and_expired_rows_are_dropped_on_save(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    await pm.save_review(review("r1"))
    await pm.save_review(review("r1", confidence=0.9))
    got = await pm.get_review("r1")
    assert got is not None and got.confidence == 0.9
    await pm.save_review(review("stale"))
    pg.execute(
        "UPDATE reviews SET deadline = NOW() - INTERVAL '2 minutes' WHERE scope = %s"
        " AND review_id = 'stale'",
        (prefix,),
    )
    await pm.save_review(review("fresh"))
    assert rows(pg, prefix) == [("fresh", "pending"), ("r1", "pending")]


async def test_kind_and_payload_are_stored(pm: PersistenceManager) -> None:
    payload = {"tool": "send_email", "args": {"to": ["a@example.com"]}, "n": 2**60}
    stored = await pm.save_review(review("r1", kind="tool_call", payload=payload))
    got = await pm.get_review("r1")
    assert got == stored and got is not None
    assert (got.kind, got.payload, got.decision) == ("tool_call", payload, None)


async def test_decide_once(pm: PersistenceManager) -> None:
    await pm.save_review(review("r1"))
    await pm.save_review(review("r2"))
    before = await pm.get_review("r1")
    decided = await pm.decide("r1", "approved", by="alice", comment="looks right")
    assert (decided.decision, decided.decided_by, decided.comment) == (
        "approved",
        "alice",
        "looks right",
    )
    assert decided.decided_at is not None
    assert abs((decided.decided_at - datetime.now(UTC)).total_seconds()) < 60
    assert await pm.get_review("r1") == decided  # still readable, until expires_at
    assert before is not None and decided.expires_at == before.expires_at
    assert [r.review_id for r in await pm.list_reviews()] == ["r2"]  # no longer pending


async def test_deciding_twice_is_refused_and_the_first_decision_stands(
    pm: PersistenceManager,
) -> None:
    await pm.save_review(review("r1"))
    first = await pm.decide("r1", "rejected", by="alice")
    with pytest.raises(ReviewAlreadyDecided) as info:
        await pm.decide("r1", "approved", by="bob")
    err = info.value
    assert isinstance(err, AmberError)
    assert (err.review_id, err.decision, err.decided_by) == ("r1", "rejected", "alice")  # type: ignore[attr-defined]
    assert await pm.get_review("r1") == first


async def test_concurrent_decisions_let_exactly_one_win(pm: PersistenceManager) -> None:
    await pm.save_review(review("r1"))
    results = await asyncio.gather(
        *(pm.decide("r1", "approved", by=f"user{i}") for i in range(10)), return_exceptions=True
    )
    won = [r for r in results if isinstance(r, ReviewItem)]
    assert len(won) == 1
    assert all(isinstance(r, ReviewAlreadyDecided) for r in results if r not in won)
    assert await pm.get_review("r1") == won[0]


async def test_deciding_an_unknown_or_expired_review_is_not_found(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    with pytest.raises(ReviewNotFound) as info:
        await pm.decide("ghost", "approved", by="alice")
    assert isinstance(info.value, NotFound) and info.value.review_id == "ghost"  # type: ignore[attr-defined]
    await pm.save_review(review("old"))
    age(pg, prefix, "old")
    with pytest.raises(ReviewNotFound):
        await pm.decide("old", "approved", by="alice")
    assert rows(pg, prefix) == [("old", "pending")]


async def test_bad_decisions_name_the_argument_and_change_nothing(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    await pm.save_review(review("r1"))
    for decision, by, field in [
        ("expired", "alice", "decision"),
        ("APPROVED", "alice", "decision"),
        (None, "alice", "decision"),
        ("approved", "", "by"),
        ("approved", "x" * 129, "by"),
        ("approved", None, "by"),
    ]:
        with pytest.raises(ValidationError) as info:
            await pm.decide("r1", decision, by=by)  # type: ignore[arg-type]
        assert info.value.field == field, (decision, by)  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="comment"):
        await pm.decide("r1", "approved", by="alice", comment=7)  # type: ignore[arg-type]
    assert rows(pg, prefix) == [("r1", "pending")]
    assert [r.review_id for r in await pm.list_reviews()] == ["r1"]


async def test_a_review_saved_with_a_decision_is_not_pending(pm: PersistenceManager) -> None:
    await pm.save_review(review("r1"))
    await pm.save_review(review("r1", decision="expired"))  # e.g. the caller gave up on it
    assert await pm.list_reviews() == []
    with pytest.raises(ReviewAlreadyDecided):
        await pm.decide("r1", "approved", by="alice")


async def test_a_task_review_is_in_the_one_queue_and_decided_once_there(
    pm: PersistenceManager, stack: amber.Stack, prefix: str
) -> None:
    await pm.save_review(review("r1", kind="tool_call", payload={"tool": "send"}))
    queued = stack.reviews.list("pending", scope=prefix)
    assert [(r.ref, r.task_id, r.analysis_id) for r in queued] == [
        (f"{prefix}:r1", "task_xyz789", None)
    ]
    assert f"{prefix}:r1" in [r.ref for r in stack.reviews.list("pending", limit=None)]
    decided = stack.reviews.approve(f"{prefix}:r1", "carol", comment="fine")
    assert (decided.status, decided.decided_by) == ("approved", "carol")
    got = await pm.get_review("r1")
    assert got is not None and (got.decision, got.decided_by, got.comment) == (
        "approved",
        "carol",
        "fine",
    )
    with pytest.raises(ReviewAlreadyDecided):
        await pm.decide("r1", "rejected", by="alice")
    with pytest.raises(ReviewAlreadyDecided):
        stack.reviews.reject(f"{prefix}:r1", "dave")


async def test_the_same_id_under_two_prefixes_are_two_reviews(
    pm: PersistenceManager, stack: amber.Stack, engines: Engines, prefix: str
) -> None:
    other = f"{prefix}-b"
    async with PersistenceManager(engines.redis_url, prefix=other) as pm2:
        await pm.save_review(review("same"))
        await pm2.save_review(review("same", confidence=0.1))
        await pm2.decide("same", "rejected", by="bob")
    got = await pm.get_review("same")
    assert got is not None and got.decision is None
    with pytest.raises(amber.InvalidValue, match=f"{prefix}:same"):
        stack.reviews.get("same")  # a bare id in two scopes: the error names both
    assert stack.reviews.get(f"{other}:same").status == "rejected"


async def test_text_postgresql_cannot_hold_is_a_validation_error(
    pm: PersistenceManager, pg: psycopg.Connection[tuple[object, ...]], prefix: str
) -> None:
    for change, field in [
        ({"decision": "approved", "decided_by": "al\x00ice"}, "decided_by"),
        ({"decision": "approved", "decided_by": "alice", "comment": "ok\x00"}, "comment"),
    ]:
        with pytest.raises(ValidationError) as info:
            await pm.save_review(review("r1", **change))
        assert info.value.field == field  # type: ignore[attr-defined]
    assert rows(pg, prefix) == []
