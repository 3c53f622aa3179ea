"""The persistence module's keys, checked against literal strings."""

from __future__ import annotations

import pytest

from amber import InvalidIdentifier
from amber.keys import Keys

K = Keys("amber")


def test_persistence_keys_are_literal() -> None:
    assert K.session("sess_abc123") == "amber:session:sess_abc123"
    assert K.session_base() == "amber:session:"
    assert K.session_index() == "amber:session_index"
    assert K.task("task_xyz789") == "amber:task:task_xyz789"
    assert K.task_base() == "amber:task:"
    assert K.task_queue("sess_abc123") == "amber:task_queue:sess_abc123"
    assert K.session_tasks("sess_abc123") == "amber:session_tasks:sess_abc123"
    assert K.review("rev_abc123") == "amber:review:rev_abc123"
    assert K.review_base() == "amber:review:"
    assert K.review_queue() == "amber:review_queue"


def test_prefix_isolates_persistence_keys() -> None:
    assert Keys("tenant-b").session("s") == "tenant-b:session:s"
    assert Keys("tenant-b").review_queue() == "tenant-b:review_queue"


@pytest.mark.parametrize(
    ("build", "kind"),
    [
        (K.session, "session_id"),
        (K.task, "task_id"),
        (K.task_queue, "session_id"),
        (K.session_tasks, "session_id"),
        (K.review, "review_id"),
    ],
)
@pytest.mark.parametrize("bad", ["", "s*", "s:1", "{s}", "s?"])
def test_bad_ids_are_refused_naming_the_kind(build: object, kind: str, bad: str) -> None:
    with pytest.raises(InvalidIdentifier, match=kind) as info:
        build(bad)  # type: ignore[operator]
    assert info.value.value == bad  # type: ignore[attr-defined]
