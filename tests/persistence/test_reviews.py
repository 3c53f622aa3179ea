"""Reviews and the review queue against real Redis: stored until expires_at, then missing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest
import redis

from amber.persistence import PersistenceManager, ReviewItem, ValidationError

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
