"""Every key amber builds, checked against literal strings."""

from __future__ import annotations

import pytest

from amber import AmberError, InvalidIdentifier
from amber.keys import Keys, check_id, check_key, check_uuid, key_part

K = Keys("amber")
AID = "550e8400-e29b-41d4-a716-446655440000"


def test_l1_keys_are_literal_and_hash_tagged() -> None:
    assert (
        K.l1("strategy_123", "current_subtask") == "amber:L1:{strategy_123}:working:current_subtask"
    )
    assert K.l1_base("strategy_123") == "amber:L1:{strategy_123}:working:"
    assert K.l1_index("strategy_123") == "amber:L1:{strategy_123}:index"
    assert K.l1_seq("strategy_123") == "amber:L1:{strategy_123}:seq"
    assert K.l1_snapshot("strategy_123") == "amber:l1_snapshot:{strategy_123}"
    assert K.l1_snapshot_meta("strategy_123") == "amber:l1_snapshot_meta:{strategy_123}"


def test_l1_key_names_may_contain_colons() -> None:
    key = K.l1("a1", "api_cache:koyfin_aapl_acquisitions")
    assert key == "amber:L1:{a1}:working:api_cache:koyfin_aapl_acquisitions"


def test_checkpoint_key() -> None:
    assert K.checkpoint("strategy_analyst_1a2b") == "amber:checkpoint:{strategy_analyst_1a2b}"
    assert K.l1_epoch("agent-7") == "amber:L1:{agent-7}:epoch"


def test_prefix_isolates() -> None:
    assert Keys("tenant-b").l1("a", "k") == "tenant-b:L1:{a}:working:k"


BAD_IDS = [
    "",
    "a*",
    "a?b",
    "a[1]",
    "x]",
    "{a}",
    "a}",
    "a:b",
    "tab\there",
    "nul\x00",
    "x" * 129,
    " lead",
    "back\\slash",
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_agent_ids_are_refused_naming_the_value(bad: str) -> None:
    with pytest.raises(InvalidIdentifier) as info:
        K.l1(bad, "k")
    assert info.value.value == bad  # type: ignore[attr-defined]
    assert isinstance(info.value, AmberError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("bad", ["", "a*", "k?", "[x]", "{k}", "k\n", "k" * 513])
def test_bad_key_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidIdentifier):
        K.l1("agent", bad)


def test_non_strings_and_bad_uuids() -> None:
    with pytest.raises(InvalidIdentifier):
        check_id(123)
    with pytest.raises(InvalidIdentifier, match="not a UUID"):
        check_uuid("not-a-uuid")
    with pytest.raises(InvalidIdentifier):
        Keys("bad*prefix")
    assert check_key("a:b:c") == "a:b:c"
    assert check_id("x" * 128) == "x" * 128


def test_langgraph_keys_are_literal_and_hash_tagged_per_thread_and_namespace() -> None:
    assert K.lg_heads("thread-1") == "amber:lg:{thread-1}:heads"
    assert K.lg_store_item(("users", "123"), "prefs") == "amber:lgs:{users.123}:prefs"


def test_names_amber_does_not_choose_are_hashed_not_refused() -> None:
    # LangGraph thread ids and store keys are the user's: "user:42" is a valid thread id
    assert K.lg_heads("user:42") == "amber:lg:{h:ea3fd43be1e57d62e163dae19fc740bd}:heads"
    assert K.lg_heads("a*b") == "amber:lg:{h:" + key_part("a*b", "x")[2:] + "}:heads"
    assert key_part("{x}", "x") != key_part("{y}", "x")
    assert key_part("ok-id", "x") == "ok-id"  # a safe id never holds ':', a digest always does
    assert K.lg_store_item(("a b",), "k:1") == "amber:lgs:{a b}:h:3263756b4d55dcaf00c0a58fbfd5e9b5"
    with pytest.raises(InvalidIdentifier):
        K.lg_heads(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidIdentifier):
        K.lg_store_item(["users"], "k")  # type: ignore[arg-type]
