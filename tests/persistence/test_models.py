"""Validation of sessions, tasks and reviews: pure, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from amber import AmberError, defaults
from amber.persistence import ReviewItem, Session, Task, ValidationError
from amber.persistence.models import dump, load, parse

SESSION = {
    "session_id": "sess_abc123",
    "goal": "Research trending AI topics",
    "status": "planning",
    "version": 1,
}
TASK = {
    "id": "task_xyz789",
    "type": "mcp_call",
    "mcp_tool": "twitter_trends",
    "parameters": {"location": "US"},
}
REVIEW = {
    "review_id": "rev_abc123",
    "task_id": "task_xyz789",
    "confidence": 0.75,
    "expires_at": "2026-02-07T21:00:00Z",
}


def test_seed_examples_validate() -> None:
    assert parse(Session, SESSION).task_queue == []
    assert parse(Task, TASK).timeout is None
    review = parse(ReviewItem, REVIEW)
    assert review.expires_at == datetime(2026, 2, 7, 21, tzinfo=UTC)


def test_review_expires_in_24h_by_default() -> None:
    review = parse(ReviewItem, {k: v for k, v in REVIEW.items() if k != "expires_at"})
    left = review.expires_at - datetime.now(UTC)
    assert timedelta(hours=23, minutes=59) < left <= timedelta(hours=24)


@pytest.mark.parametrize(
    ("model", "base", "change", "field"),
    [
        (Session, SESSION, {"session_id": "a*b"}, "session_id"),
        (Session, SESSION, {"session_id": "a:b"}, "session_id"),
        (Session, SESSION, {"goal": ""}, "goal"),
        (Session, SESSION, {"status": None}, "status"),
        (Session, SESSION, {"version": -1}, "version"),
        (Session, SESSION, {"version": "one"}, "version"),
        (Session, SESSION, {"task_queue": ["ok", "bad*id"]}, "task_queue"),
        (Session, SESSION, {"colour": "red"}, "colour"),
        (Task, TASK, {"id": "[x]"}, "id"),
        (Task, TASK, {"type": ""}, "type"),
        (Task, TASK, {"timeout": 0}, "timeout"),
        (Task, TASK, {"timeout": float("nan")}, "timeout"),
        (Task, TASK, {"parameters": {"blob": {1, 2}}}, "parameters"),
        (Task, TASK, {"parameters": "US"}, "parameters"),
        (Task, TASK, {"parameters": {"x": [1.0, float("nan")]}}, "parameters"),
        (Task, TASK, {"parameters": {"x": {"y": float("-inf")}}}, "parameters"),
        (Task, TASK, {"parameters": {"x": 2**64}}, "parameters"),
        (Task, TASK, {"parameters": {"x": "\ud800"}}, "parameters"),
        (Task, TASK, {"parameters": {"x": b"raw"}}, "parameters"),
        (Task, TASK, {"type": "t" * 65}, "type"),
        (Session, SESSION, {"goal": "a\udcffb"}, "goal"),
        (Session, SESSION, {"session_id": "s\ud800"}, "session_id"),
        (Session, SESSION, {"status": "s" * 65}, "status"),
        (ReviewItem, REVIEW, {"confidence": 1.5}, "confidence"),
        (ReviewItem, REVIEW, {"confidence": -0.1}, "confidence"),
        (ReviewItem, REVIEW, {"confidence": float("nan")}, "confidence"),
        (ReviewItem, REVIEW, {"expires_at": "2026-02-07T21:00:00"}, "expires_at"),
        (ReviewItem, REVIEW, {"expires_at": "tomorrow"}, "expires_at"),
        (ReviewItem, REVIEW, {"task_id": "t?"}, "task_id"),
        (ReviewItem, REVIEW, {"kind": "tool:call"}, "kind"),
        (ReviewItem, REVIEW, {"kind": "k" * 129}, "kind"),
        (ReviewItem, REVIEW, {"payload": {"x": float("nan")}}, "payload"),
        (ReviewItem, REVIEW, {"payload": ["not", "an", "object"]}, "payload"),
        (ReviewItem, REVIEW, {"decision": "maybe"}, "decision"),
        (ReviewItem, REVIEW, {"decided_by": ""}, "decided_by"),
        (ReviewItem, REVIEW, {"decided_at": "2026-02-07T21:00:00"}, "decided_at"),
        (ReviewItem, REVIEW, {"comment": "a\udcffb"}, "comment"),
        (ReviewItem, REVIEW, {"comment": "c" * 10_001}, "comment"),
    ],
)
def test_invalid_input_names_the_field(
    model: type[Any], base: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        parse(model, {**base, **change})
    assert info.value.field == field  # type: ignore[attr-defined]
    assert field in str(info.value)
    assert isinstance(info.value, AmberError) and isinstance(info.value, ValueError)


def test_missing_field_is_named() -> None:
    with pytest.raises(ValidationError, match="goal") as info:
        parse(Session, {"session_id": "s", "status": "planning"})
    assert info.value.field == "goal"  # type: ignore[attr-defined]


def test_not_a_dict_is_refused() -> None:
    with pytest.raises(ValidationError, match="must be a dict or Session"):
        parse(Session, ["sess_abc123"])  # type: ignore[arg-type]


def test_an_edited_model_is_checked_again() -> None:
    session = parse(Session, SESSION)
    session.task_queue.append("bad*id")  # list edits bypass assignment validation
    with pytest.raises(ValidationError, match=r"task_queue: item 0: task id contains '\*'"):
        parse(Session, session)


def test_a_bad_assignment_is_amber_s_error_at_save() -> None:
    session = parse(Session, SESSION)
    session.status = ""
    with pytest.raises(ValidationError) as info:
        parse(Session, session)
    assert info.value.field == "status"  # type: ignore[attr-defined]


def test_a_stored_session_starts_with_its_version() -> None:
    assert dump(parse(Session, SESSION)).startswith(b'{"version":1,"session_id":"sess_abc123",')


def test_json_round_trip_is_plain_json() -> None:
    for model, doc in ((Session, SESSION), (Task, TASK), (ReviewItem, REVIEW)):
        checked = parse(model, doc)
        raw = dump(checked)
        assert isinstance(orjson.loads(raw), dict)
        assert load(model, raw) == checked


def test_tampered_documents_are_reported() -> None:
    with pytest.raises(ValidationError, match="not JSON"):
        load(Session, b"\x80\x04pickle")
    with pytest.raises(ValidationError, match="version") as info:
        load(Session, orjson.dumps({**SESSION, "version": "x"}))
    assert info.value.stored is True  # type: ignore[attr-defined]


def test_errors_keep_their_context_across_processes() -> None:
    import pickle  # exceptions only: this is how multiprocessing hands them back

    from amber import NotFound, StoreUnavailable
    from amber.persistence import RedisConnectionError, SessionNotFoundError, VersionConflictError

    err = pickle.loads(
        pickle.dumps(VersionConflictError("stale", session_id="s", expected=1, actual=2))
    )
    assert (err.expected, err.actual, err.session_id) == (1, 2, "s")  # type: ignore[attr-defined]
    assert issubclass(SessionNotFoundError, NotFound)
    assert issubclass(RedisConnectionError, StoreUnavailable)


def test_a_document_over_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "DOCUMENT_MAX_BYTES", 1000)
    with pytest.raises(ValidationError, match="over the limit") as info:
        dump(parse(Session, {**SESSION, "goal": "g" * 1000}))
    assert info.value.field == "(document)"  # type: ignore[attr-defined]
    assert len(dump(parse(Session, {**SESSION, "goal": "g" * 900}))) <= 1000
