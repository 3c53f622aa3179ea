"""The persistence module's keys, checked against literal strings."""

from __future__ import annotations

import pytest

from amber import InvalidIdentifier
from amber.keys import Keys

K = Keys("amber")


def test_persistence_keys_are_literal() -> None:
    assert K.session("sess_abc123") == "amber:session:{sess_abc123}"
    assert K.task_queue("sess_abc123") == "amber:task_queue:{sess_abc123}"
    assert K.tasks("sess_abc123") == "amber:tasks:{sess_abc123}"
    assert K.task_expiry("sess_abc123") == "amber:task_expiry:{sess_abc123}"
    assert K.task_session("task_xyz789") == "amber:task_session:task_xyz789"
    assert K.session_index() == "amber:session_index"


def test_prefix_isolates_persistence_keys() -> None:
    assert Keys("tenant-b").session("s") == "tenant-b:session:{s}"


def _slot(key: str) -> str:
    """What Redis Cluster hashes: the first non-empty ``{...}``, else the whole key."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else key


def test_a_sessions_keys_share_a_slot() -> None:
    session = [K.session("s1"), K.task_queue("s1"), K.tasks("s1"), K.task_expiry("s1")]
    assert {_slot(k) for k in session} == {"s1"}


@pytest.mark.parametrize(
    ("build", "kind"),
    [
        (K.session, "session_id"),
        (K.task_queue, "session_id"),
        (K.tasks, "session_id"),
        (K.task_expiry, "session_id"),
        (K.task_session, "task_id"),
    ],
)
@pytest.mark.parametrize("bad", ["", "s*", "s:1", "{s}", "s?"])
def test_bad_ids_are_refused_naming_the_kind(build: object, kind: str, bad: str) -> None:
    with pytest.raises(InvalidIdentifier, match=kind) as info:
        build(bad)  # type: ignore[operator]
    assert info.value.value == bad  # type: ignore[attr-defined]
