"""Every key amber builds, checked against literal strings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amber import AmberError, InvalidIdentifier, InvalidValue, defaults
from amber.keys import (
    Keys,
    check_id,
    check_int,
    check_key,
    check_keys,
    check_reason,
    check_seq,
    check_text,
    check_ticker,
    check_utf8,
    check_uuid,
    check_version,
    key_part,
)

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


def _verdict(names: list[str]) -> str | list[str]:
    try:
        return [check_key(n) for n in names]
    except InvalidIdentifier as exc:
        return str(exc)


_NAME_CHARS = st.sampled_from(list("ab:-_ *?[]{}\\\n\t\r\x0b\x1c\x00\x7f\x85\u00a0\u2028\ud800é"))


@given(st.lists(st.text(_NAME_CHARS, max_size=6) | st.just("x" * 513), max_size=5))
def test_checking_many_names_at_once_agrees_with_checking_each(names: list[str]) -> None:
    """check_keys' one pass over joined names accepts and refuses exactly what check_key
    does, with the same error."""
    try:
        assert check_keys(names) == _verdict(names)
    except InvalidIdentifier as exc:
        assert str(exc) == _verdict(names)


def test_non_strings_and_bad_uuids() -> None:
    with pytest.raises(InvalidIdentifier):
        check_id(123)
    with pytest.raises(InvalidIdentifier, match="not a UUID"):
        check_uuid("not-a-uuid")
    with pytest.raises(InvalidIdentifier):
        Keys("bad*prefix")
    assert check_key("a:b:c") == "a:b:c"
    assert check_id("x" * 128) == "x" * 128


@pytest.mark.parametrize("bad", ["\ud800", "a\udcffb", "\udfff"])
def test_lone_surrogates_are_refused_before_redis(bad: str) -> None:
    with pytest.raises(InvalidIdentifier, match="UTF-8") as info:
        K.l1("agent", bad)
    assert info.value.field == "key name"  # type: ignore[attr-defined]
    with pytest.raises(InvalidIdentifier, match="agent_id"):
        K.l1(bad, "k")


def test_errors_name_the_field_and_shorten_long_values() -> None:
    with pytest.raises(InvalidIdentifier) as info:
        check_id("x" * 10_000, "session_id")
    assert info.value.field == "session_id"  # type: ignore[attr-defined]
    assert info.value.value == "x" * 10_000  # type: ignore[attr-defined]
    assert len(str(info.value)) < 400 and "(10002 chars)" in str(info.value)


def test_ticker() -> None:
    assert check_ticker("BRK.B") == "BRK.B"
    assert check_ticker("X" * defaults.TICKER_MAX_LEN) == "X" * 32
    for bad in ["", "X" * 33, "A*", "AAPL:US", "\ud800", "A\x00", 5, None]:
        with pytest.raises(InvalidIdentifier) as info:
            check_ticker(bad)
        assert info.value.field == "stock_ticker"  # type: ignore[attr-defined]


def test_version() -> None:
    assert check_version("2.1.3-beta") == "2.1.3-beta"
    assert check_version("v" * defaults.VERSION_MAX_LEN) == "v" * 20
    for bad in ["", "v" * 21, " 1.0", "1.0\n", "1\x00", "\ud800", 1.0, b"1.0"]:
        with pytest.raises(InvalidValue, match="agent_version") as info:
            check_version(bad)
        assert info.value.field == "agent_version"  # type: ignore[attr-defined]


def test_reason_and_text() -> None:
    assert check_reason("quota exhausted\nretry tomorrow") == "quota exhausted\nretry tomorrow"
    assert check_reason("r" * defaults.REASON_MAX_LEN, "by") == "r" * 1000
    for bad in ["", "r" * 1001, "a\x00b", "\ud83d", b"why", None]:
        with pytest.raises(InvalidValue) as info:
            check_reason(bad, "by")
        assert info.value.field == "by"  # type: ignore[attr-defined]
    assert check_text("", "note", 5, allow_empty=True) == ""
    assert check_text("émoji 😀", "note", 7) == "émoji 😀"
    with pytest.raises(InvalidValue, match="longer than 3") as info:
        check_text("abcd", "note", 3, agent_id="a1")
    assert info.value.agent_id == "a1"  # type: ignore[attr-defined]


def test_utf8() -> None:
    assert check_utf8("a\x00b", "value") == "a\x00b"
    assert check_utf8(b"\xff", "value") == b"\xff"
    with pytest.raises(InvalidValue, match="surrogate") as info:
        check_utf8("\udcff", "value", key="k")
    assert info.value.key == "k"  # type: ignore[attr-defined]


def test_int_and_seq() -> None:
    assert check_int(5, "limit", 0, 10) == 5
    assert check_seq(defaults.SEQ_MAX) == 2**63 - 1
    for bad in [True, 1.0, "1", None, -1, 11]:
        with pytest.raises(InvalidValue, match="limit"):
            check_int(bad, "limit", 0, 10)
    with pytest.raises(InvalidValue, match="seq"):
        check_seq(2**63)


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
