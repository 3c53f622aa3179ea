"""Reviews and the review queue against real Redis: stored until expires_at, then missing;
decided once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import orjson
import pytest
import redis

from amber import AmberError, NotFound
from amber.persistence import (
    PersistenceManager,
    ReviewAlreadyDecided,
    ReviewItem,
    ReviewNotFound,
    ValidationError,
)

from .conftest import DAY_MS, keys_under

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


async def test_save_then_get(pm: PersistenceManager) -> None:
    stored = await pm.save_review(review("r1"))
    got = await pm.get_review("r1")
    assert got == stored and isinstance(got, ReviewItem)
    assert got.confidence == 0.75
    assert await pm.get_review("nothing") is None


async def test_review_lives_until_expires_at(pm: PersistenceManager, raw: redis.Redis) -> None:
    stored = await pm.save_review(review("r1", timedelta(hours=2)))
    left_ms = stored.expires_at_ms() - datetime.now(UTC).timestamp() * 1000
    assert abs(raw.pttl(pm.keys.review("r1")) - left_ms) < 60_000


async def test_default_expiry_is_24h(pm: PersistenceManager, raw: redis.Redis) -> None:
    await pm.save_review({"review_id": "r1", "task_id": "t1", "confidence": 0.5})
    assert DAY_MS - 60_000 < raw.pttl(pm.keys.review("r1")) <= DAY_MS


async def test_a_review_past_expires_at_is_missing_even_if_redis_holds_it(
    pm: PersistenceManager, raw: redis.Redis
) -> None:
    stored = await pm.save_review(review("r1"))
    past = stored.model_copy(update={"expires_at": datetime.now(UTC) - timedelta(seconds=1)})
    raw.set(pm.keys.review("r1"), orjson.dumps(past.model_dump()))  # no TTL: Redis keeps it
    assert raw.exists(pm.keys.review("r1"))
    assert await pm.get_review("r1") is None
    assert await pm.list_reviews() == []


async def test_an_already_expired_review_is_refused(
    pm: PersistenceManager, raw: redis.Redis, prefix: str
) -> None:
    with pytest.raises(ValidationError, match="expires_at") as info:
        await pm.save_review(review("r1", timedelta(seconds=-1)))
    assert info.value.field == "expires_at"  # type: ignore[attr-defined]
    assert keys_under(raw, prefix) == []


async def test_invalid_reviews_name_the_field_and_write_nothing(
    pm: PersistenceManager, raw: redis.Redis, prefix: str
) -> None:
    for change, field in [
        ({"confidence": 1.01}, "confidence"),
        ({"review_id": "r:1"}, "review_id"),
        ({"expires_at": "2026-02-07 21:00"}, "expires_at"),
    ]:
        with pytest.raises(ValidationError) as info:
            await pm.save_review(review("r1", **change))
        assert info.value.field == field  # type: ignore[attr-defined]
    assert keys_under(raw, prefix) == []


async def test_list_soonest_first_and_remove(pm: PersistenceManager, raw: redis.Redis) -> None:
    assert await pm.list_reviews() == []
    for rid, hours in (("late", 5), ("soon", 1), ("mid", 3)):
        await pm.save_review(review(rid, timedelta(hours=hours)))
    assert [r.review_id for r in await pm.list_reviews()] == ["soon", "mid", "late"]
    assert [r.review_id for r in await pm.list_reviews(limit=1)] == ["soon"]
    assert await pm.remove_review("mid") is True
    assert await pm.remove_review("mid") is False
    assert await pm.get_review("mid") is None
    raw.delete(pm.keys.review("late"))  # gone from under the queue (e.g. expired)
    assert [r.review_id for r in await pm.list_reviews()] == ["soon"]
    assert raw.zrange(pm.keys.review_queue(), 0, -1) == [b"soon"]


async def test_queue_entries_past_expiry_are_trimmed_on_save(
    pm: PersistenceManager, raw: redis.Redis
) -> None:
    queue = pm.keys.review_queue()
    raw.zadd(queue, {"stale": 1_000})  # an entry whose expires_at passed long ago
    await pm.save_review(review("fresh"))
    assert raw.zrange(queue, 0, -1) == [b"fresh"]


async def test_kind_and_payload_are_stored(pm: PersistenceManager) -> None:
    payload = {"tool": "send_email", "args": {"to": ["a@example.com"]}, "n": 2**60}
    stored = await pm.save_review(review("r1", kind="tool_call", payload=payload))
    got = await pm.get_review("r1")
    assert got == stored and got is not None
    assert (got.kind, got.payload, got.decision) == ("tool_call", payload, None)


async def test_decide_once(pm: PersistenceManager, raw: redis.Redis) -> None:
    await pm.save_review(review("r1"))
    await pm.save_review(review("r2"))
    before = raw.pttl(pm.keys.review("r1"))
    decided = await pm.decide("r1", "approved", by="alice", comment="looks right")
    assert (decided.decision, decided.decided_by, decided.comment) == (
        "approved",
        "alice",
        "looks right",
    )
    assert decided.decided_at is not None
    assert abs((decided.decided_at - datetime.now(UTC)).total_seconds()) < 60
    assert await pm.get_review("r1") == decided  # still readable, until expires_at
    assert abs(raw.pttl(pm.keys.review("r1")) - before) < 60_000
    assert [r.review_id for r in await pm.list_reviews()] == ["r2"]  # no longer pending
    assert raw.zrange(pm.keys.review_queue(), 0, -1) == [b"r2"]


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
    pm: PersistenceManager, raw: redis.Redis, prefix: str
) -> None:
    with pytest.raises(ReviewNotFound) as info:
        await pm.decide("ghost", "approved", by="alice")
    assert isinstance(info.value, NotFound) and info.value.review_id == "ghost"  # type: ignore[attr-defined]
    assert keys_under(raw, prefix) == []
    stored = await pm.save_review(review("old"))
    past = stored.model_copy(update={"expires_at": datetime.now(UTC) - timedelta(seconds=1)})
    raw.set(pm.keys.review("old"), orjson.dumps(past.model_dump()))  # no TTL: Redis keeps it
    with pytest.raises(ReviewNotFound):
        await pm.decide("old", "approved", by="alice")
    assert raw.get(pm.keys.review("old")) == orjson.dumps(past.model_dump())


async def test_bad_decisions_name_the_argument_and_change_nothing(
    pm: PersistenceManager, raw: redis.Redis
) -> None:
    await pm.save_review(review("r1"))
    before = raw.get(pm.keys.review("r1"))
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
    assert raw.get(pm.keys.review("r1")) == before
    assert [r.review_id for r in await pm.list_reviews()] == ["r1"]


async def test_a_review_saved_with_a_decision_is_not_pending(pm: PersistenceManager) -> None:
    await pm.save_review(review("r1"))
    await pm.save_review(review("r1", decision="expired"))  # e.g. the caller gave up on it
    assert await pm.list_reviews() == []
    with pytest.raises(ReviewAlreadyDecided):
        await pm.decide("r1", "approved", by="alice")
