"""A behavioural suite for LangGraph stores (``BaseStore``), reusable by any implementation.

LangGraph ships no conformance suite for stores; this is one. To run it against a store,
import its tests into a test module and provide a ``store_under_test`` fixture that
returns a :class:`StoreUnderTest` (a fresh store, or one shared safely: every test
works under a namespace root of its own)::

    from tests.langgraph.store_suite import *  # noqa: F403

    @pytest.fixture
    def store_under_test() -> StoreUnderTest:
        return StoreUnderTest("InMemoryStore", InMemoryStore())

The reference semantics are ``InMemoryStore``'s and ``BaseStore``'s documentation: a
filter's ``$gt``/``$gte``/``$lt``/``$lte`` compare numbers, TTLs are minutes (fractions
allowed) renewed by reads unless told not to, an expired item is never returned.
Where a store is known to behave otherwise, ``DEVIATIONS`` names the test and why, and
the test runs as a strict xfail for that store only: it still runs, and it will say so
the day the store changes.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

__all__ = [
    "DEVIATIONS",
    "StoreUnderTest",
    "known_deviation",
    "test_async_calls_behave_as_the_sync_ones",
    "test_batch_returns_each_result_at_its_operation",
    "test_delete_removes_and_deleting_nothing_is_fine",
    "test_expired_items_are_never_returned",
    "test_filters_compare_numbers_as_numbers",
    "test_filters_match_nested_objects",
    "test_filters_on_equality_and_not_equality",
    "test_get_of_what_is_not_there_is_none",
    "test_large_values_round_trip_and_are_replaced",
    "test_list_namespaces_drops_namespaces_left_empty",
    "test_list_namespaces_matches_cuts_and_pages",
    "test_namespaces_are_checked",
    "test_put_replaces",
    "test_put_then_get_round_trips_json_values",
    "test_reads_renew_a_ttl_unless_told_not_to",
    "test_search_pages_without_overlap",
    "test_search_scopes_by_namespace_prefix",
    "test_ttls_are_fractional_minutes",
]

PG_TEXT = "PostgresStore compares $gt/$gte/$lt/$lte as text (value->>'k' > '5'), so 10 > 5 is false"
PG_EXPIRED = (
    "PostgresStore returns expired items until a sweep deletes them (unless ttl_config sets"
    " omit_expired)"
)
PG_MINUTES = (
    "PostgresStore keeps ttl_minutes as an integer: a TTL of 0.025 minutes is renewed as 0"
    " minutes (then read as expired, yet returned until a sweep)"
)
PG_NESTED = (
    "PostgresStore reads every object in a filter as operators: {'meta': {'kind': 'x'}}"
    " raises 'Unsupported operator: kind'"
)
MEM_EMPTY = (
    "InMemoryStore keeps a namespace in its dict after its last item is deleted (and creates"
    " one on any get), so list_namespaces still lists it"
)

DEVIATIONS: dict[str, dict[str, str]] = {
    "PostgresStore": {
        "test_filters_compare_numbers_as_numbers": PG_TEXT,
        "test_filters_match_nested_objects": PG_NESTED,
        "test_expired_items_are_never_returned": PG_EXPIRED,
        "test_ttls_are_fractional_minutes": PG_EXPIRED,
        "test_reads_renew_a_ttl_unless_told_not_to": PG_MINUTES,
    },
    "InMemoryStore": {
        "test_list_namespaces_drops_namespaces_left_empty": MEM_EMPTY,
    },
}
"""Known deviations from the reference, per store: test name -> why."""


@dataclass
class StoreUnderTest:
    """A store and the name ``DEVIATIONS`` knows it by."""

    name: str
    store: BaseStore


@pytest.fixture(autouse=True)
def known_deviation(request: pytest.FixtureRequest, store_under_test: StoreUnderTest) -> None:
    """Run a test a store is known to fail as a strict xfail, with the reason."""
    name = getattr(request.node, "originalname", request.node.name)
    reason = DEVIATIONS.get(store_under_test.name, {}).get(name)
    if reason:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


def root() -> str:
    """A namespace root no other test uses."""
    return f"suite-{uuid.uuid4().hex[:12]}"


def needs_ttl(s: StoreUnderTest) -> BaseStore:
    if not s.store.supports_ttl:
        pytest.skip(f"{s.name} declares no TTL support (supports_ttl is False)")
    return s.store


def keys(items: list[Any]) -> set[tuple[tuple[str, ...], str]]:
    return {(i.namespace, i.key) for i in items}


def test_put_then_get_round_trips_json_values(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(), "users", "u1")
    value = {"name": "Ada", "n": 3, "f": 2.5, "ok": True, "none": None, "tags": ["a", "é"],
             "nested": {"deep": {"x": [1, {"y": 2}]}}, "big": 2**62}  # fmt: skip
    store.put(ns, "prefs", value)
    item = store.get(ns, "prefs")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (ns, "prefs", value)
    assert isinstance(item.created_at, datetime) and isinstance(item.updated_at, datetime)
    assert item.updated_at >= item.created_at


def test_get_of_what_is_not_there_is_none(store_under_test: StoreUnderTest) -> None:
    store, base = store_under_test.store, root()
    store.put((base, "a"), "k", {"v": 1})
    assert store.get((base, "a"), "other") is None
    assert store.get((base, "b"), "k") is None
    assert store.get((base,), "k") is None


def test_put_replaces(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    store.put(ns, "k", {"v": 1, "gone": True})
    first = store.get(ns, "k")
    store.put(ns, "k", {"v": 2})
    second = store.get(ns, "k")
    assert first is not None and second is not None
    assert second.value == {"v": 2}
    assert second.updated_at >= first.updated_at


def test_delete_removes_and_deleting_nothing_is_fine(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    store.put(ns, "k", {"v": 1})
    store.delete(ns, "k")
    assert store.get(ns, "k") is None
    store.delete(ns, "k")
    store.delete(ns, "never")


def test_search_scopes_by_namespace_prefix(store_under_test: StoreUnderTest) -> None:
    store, base = store_under_test.store, root()
    store.put((base, "docs"), "a", {"v": 1})
    store.put((base, "docs", "2024"), "b", {"v": 2})
    store.put((base, "docsx"), "c", {"v": 3})  # shares a string prefix, not a label
    store.put((base,), "d", {"v": 4})
    assert keys(store.search((base, "docs"), limit=50)) == {
        ((base, "docs"), "a"),
        ((base, "docs", "2024"), "b"),
    }
    assert len(store.search((base,), limit=50)) == 4
    assert keys(store.search((base, "docs", "2024"))) == {((base, "docs", "2024"), "b")}
    everything = keys(store.search((), limit=10_000))
    assert ((base,), "d") in everything


def test_filters_on_equality_and_not_equality(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    store.put(ns, "a", {"color": "red", "size": 1, "meta": {"kind": "x", "n": 1}})
    store.put(ns, "b", {"color": "red", "size": 2, "meta": {"kind": "y"}})
    store.put(ns, "c", {"color": "blue", "size": 1})

    def found(flt: dict[str, Any]) -> set[str]:
        return {i.key for i in store.search(ns, filter=flt, limit=50)}

    assert found({"color": "red"}) == {"a", "b"}
    assert found({"color": "red", "size": 1}) == {"a"}
    assert found({"color": {"$eq": "blue"}}) == {"c"}
    assert found({"color": {"$ne": "red"}}) == {"c"}
    assert found({"color": "green"}) == set()


def test_filters_match_nested_objects(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    store.put(ns, "a", {"meta": {"kind": "x", "n": 1}})
    store.put(ns, "b", {"meta": {"kind": "y"}})
    store.put(ns, "c", {"meta": "x"})
    assert {i.key for i in store.search(ns, filter={"meta": {"kind": "x"}})} == {"a"}


def test_filters_compare_numbers_as_numbers(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    for key, score in (("two", 2), ("ten", 10), ("thirty", 30), ("half", 0.5)):
        store.put(ns, key, {"score": score})

    def found(flt: dict[str, Any]) -> set[str]:
        return {i.key for i in store.search(ns, filter=flt, limit=50)}

    assert found({"score": {"$gt": 5}}) == {"ten", "thirty"}
    assert found({"score": {"$gte": 10}}) == {"ten", "thirty"}
    assert found({"score": {"$lt": 10}}) == {"two", "half"}
    assert found({"score": {"$lte": 2, "$gt": 0.5}}) == {"two"}


def test_search_pages_without_overlap(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    for i in range(7):
        store.put(ns, f"k{i}", {"i": i})
    pages = [store.search(ns, limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [len(p) for p in pages] == [3, 3, 1, 0]
    seen = [i.key for p in pages for i in p]
    assert sorted(seen) == [f"k{i}" for i in range(7)]


def test_list_namespaces_matches_cuts_and_pages(store_under_test: StoreUnderTest) -> None:
    store, base = store_under_test.store, root()
    for ns in [(base, "a", "b", "c"), (base, "a", "b", "d", "e"), (base, "a", "b", "d", "i"),
               (base, "a", "b", "f"), (base, "a", "c", "f"), (base, "x", "v1")]:  # fmt: skip
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=(base, "a", "b"), max_depth=4) == [
        (base, "a", "b", "c"),
        (base, "a", "b", "d"),
        (base, "a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=(base, "*", "c")) == [(base, "a", "c", "f")]
    assert store.list_namespaces(prefix=(base,), suffix=("f",)) == [
        (base, "a", "b", "f"),
        (base, "a", "c", "f"),
    ]
    everything = store.list_namespaces(prefix=(base,))
    assert len(everything) == 6 and everything == sorted(everything)
    assert store.list_namespaces(prefix=(base,), limit=2, offset=1) == everything[1:3]
    assert store.list_namespaces(prefix=(base,), max_depth=2) == [(base, "a"), (base, "x")]


def test_list_namespaces_drops_namespaces_left_empty(store_under_test: StoreUnderTest) -> None:
    store, base = store_under_test.store, root()
    store.put((base, "kept"), "k", {"v": 1})
    store.put((base, "gone"), "k", {"v": 1})
    store.delete((base, "gone"), "k")
    store.get((base, "never"), "k")
    assert store.list_namespaces(prefix=(base,)) == [(base, "kept")]


def test_namespaces_are_checked(store_under_test: StoreUnderTest) -> None:
    store = store_under_test.store
    for bad in [(), ("a.b",), ("",), ("langgraph", "x")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.get(("a.b",), "k")
    with pytest.raises(InvalidNamespaceError):
        store.search(("",))


def test_batch_returns_each_result_at_its_operation(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    store.put(ns, "k", {"v": 1})
    got, found, listed, put = store.batch(
        [
            GetOp(ns, "k"),
            SearchOp(ns),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ns),)),
            PutOp(ns, "other", {"v": 2}),
        ]
    )
    assert isinstance(got, Item) and got.value == {"v": 1}
    assert isinstance(found, list) and [i.key for i in found] == ["k"]
    assert listed == [ns]
    assert put is None
    assert store.get(ns, "other") is not None


def test_large_values_round_trip_and_are_replaced(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(),)
    big = {"text": "lorem ipsum " * 10_000, "rows": [{"i": i, "sq": i * i} for i in range(2000)]}
    store.put(ns, "doc", big)
    item = store.get(ns, "doc")
    assert item is not None and item.value == big
    store.put(ns, "doc", {**big, "text": "changed"})
    item = store.get(ns, "doc")
    assert item is not None and item.value["text"] == "changed"
    store.delete(ns, "doc")
    assert store.get(ns, "doc") is None


def test_async_calls_behave_as_the_sync_ones(store_under_test: StoreUnderTest) -> None:
    store, ns = store_under_test.store, (root(), "async")

    async def scenario() -> None:
        await store.aput(ns, "k", {"v": 1})
        item = await store.aget(ns, "k")
        assert item is not None and item.value == {"v": 1}
        assert [i.key for i in await store.asearch(ns[:1])] == ["k"]
        assert await store.alist_namespaces(prefix=ns[:1]) == [ns]
        await store.adelete(ns, "k")
        assert await store.aget(ns, "k") is None

    asyncio.run(scenario())


def test_expired_items_are_never_returned(store_under_test: StoreUnderTest) -> None:
    store, base = needs_ttl(store_under_test), root()
    store.put((base, "short"), "k", {"v": 1}, ttl=0.01)  # 0.6 s
    store.put((base, "long"), "k", {"v": 1}, ttl=10)
    assert store.get((base, "short"), "k", refresh_ttl=False) is not None
    time.sleep(1.0)
    assert store.get((base, "short"), "k") is None
    assert keys(store.search((base,), limit=50)) == {((base, "long"), "k")}
    assert store.list_namespaces(prefix=(base,)) == [(base, "long")]


def test_ttls_are_fractional_minutes(store_under_test: StoreUnderTest) -> None:
    store, ns = needs_ttl(store_under_test), (root(),)
    store.put(ns, "k", {"v": 1}, ttl=0.025)  # 1.5 s, not rounded up to a minute
    time.sleep(0.6)
    assert store.get(ns, "k", refresh_ttl=False) is not None
    time.sleep(1.4)
    assert store.get(ns, "k", refresh_ttl=False) is None


def test_reads_renew_a_ttl_unless_told_not_to(store_under_test: StoreUnderTest) -> None:
    store, ns = needs_ttl(store_under_test), (root(),)
    for key in ("got", "peeked", "found"):  # each lives 1.5 s from its last renewal
        store.put(ns, key, {"key": key}, ttl=0.025)
    time.sleep(0.9)
    assert store.get(ns, "got") is not None  # renewed: until 2.4 s
    assert store.get(ns, "peeked", refresh_ttl=False) is not None  # not renewed: until 1.5 s
    assert len(store.search(ns, filter={"key": "found"})) == 1  # renewed: until 2.4 s
    time.sleep(0.9)
    assert store.get(ns, "got", refresh_ttl=False) is not None
    assert store.get(ns, "found", refresh_ttl=False) is not None
    assert store.get(ns, "peeked", refresh_ttl=False) is None
    time.sleep(0.8)
    assert store.get(ns, "got", refresh_ttl=False) is None
    assert store.search(ns, refresh_ttl=False) == []
