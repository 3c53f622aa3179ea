"""AmberStore beyond the shared suite: its verified Redis cache, numeric text in filters,
named errors, sweeping and a default TTL."""

from __future__ import annotations

import uuid

import pytest
from langgraph.store.base import InvalidNamespaceError, PutOp

import amber
from amber import AmberError, InvalidValue
from amber.langgraph import AmberStore

BIG = {"text": " ".join(uuid.uuid4().hex for _ in range(400))}
"""13 KB of JSON that does not compress: PostgreSQL keeps it as it is."""


def test_a_large_value_comes_from_redis_only_while_it_names_the_current_version(
    stack: amber.Stack,
) -> None:
    store, ns = AmberStore(stack), ("cache", uuid.uuid4().hex)
    store.put(ns, "doc", BIG)
    cache_key = stack.keys.lg_store_item(ns, "doc")
    assert stack.redis.exists(cache_key) == 1
    with stack.pg.connection() as conn:  # change PostgreSQL's value behind amber's back,
        conn.execute(  # version unchanged: the cached copy still names it, so it is used
            'UPDATE lg_store SET value = \'{"text": "pg"}\' WHERE prefix = %s', (".".join(ns),)
        )
    item = store.get(ns, "doc")
    assert item is not None and item.value == BIG
    with stack.pg.connection() as conn:  # a new version: the copy is stale, PostgreSQL wins
        conn.execute(
            "UPDATE lg_store SET version = nextval('lg_store_version') WHERE prefix = %s",
            (".".join(ns),),
        )
    item = store.get(ns, "doc")
    assert item is not None and item.value == {"text": "pg"}


def test_a_damaged_cached_value_is_not_used(stack: amber.Stack) -> None:
    store, ns = AmberStore(stack), ("cache", uuid.uuid4().hex)
    store.put(ns, "doc", BIG)
    cache_key = stack.keys.lg_store_item(ns, "doc")
    sealed = bytearray(stack.redis.get(cache_key) or b"")
    sealed[-10] ^= 0x01
    stack.redis.set(cache_key, bytes(sealed))
    item = store.get(ns, "doc")
    assert item is not None and item.value == BIG
    assert stack.redis.get(cache_key) != bytes(sealed)


def test_numeric_text_compares_as_a_number_and_bad_filters_are_named(stack: amber.Stack) -> None:
    store, ns = AmberStore(stack), ("filters", uuid.uuid4().hex)
    store.put(ns, "a", {"n": "10"})
    store.put(ns, "b", {"n": 9})
    store.put(ns, "c", {"n": "ten"})
    assert {i.key for i in store.search(ns, filter={"n": {"$gt": "9.5"}})} == {"a"}
    for flt, field in (({"n": {"$gt": "ten"}}, "filter.n"), ({"n": {"$in": [1]}}, "filter.n")):
        with pytest.raises(InvalidValue) as info:
            store.search(ns, filter=flt)
        assert info.value.context["field"] == field


def test_bad_input_is_an_amber_error_naming_the_field(stack: amber.Stack) -> None:
    store = AmberStore(stack)
    cases = [
        (lambda: store.put(("a.b",), "k", {}), "namespace"),
        (lambda: store.put(("ok",), "k\x00", {}), "key"),
        (lambda: store.put(("ok",), "k", {"v": "nul\x00"}), "value"),
        (lambda: store.put(("ok",), "k", {"v": {1, 2}}), "value"),
        (lambda: store.put(("ok",), "k", {"v": 1}, ttl=-1), "ttl"),
        (lambda: store.search(("ok",), limit=-1), "limit"),
        (lambda: store.batch([PutOp(("ok",), "k", ["not", "a", "mapping"])]), "value"),  # type: ignore[arg-type]
    ]
    for call, field in cases:
        with pytest.raises(AmberError) as info:
            call()
        assert info.value.context["field"] == field
    with pytest.raises(InvalidNamespaceError):  # and LangGraph's own error class too
        store.get(("a.b",), "k")


def test_sweep_deletes_what_reads_already_hide(stack: amber.Stack) -> None:
    store, ns = AmberStore(stack), ("sweep", uuid.uuid4().hex)
    store.put(ns, "k", {"v": 1}, ttl=0.001)
    store.put(ns, "kept", {"v": 1})
    with stack.pg.connection() as conn:
        conn.execute("UPDATE lg_store SET expires_at = now() - interval '1 second'"
                     " WHERE prefix = %s AND key = 'k'", (".".join(ns),))  # fmt: skip
    assert store.get(ns, "k") is None
    assert store.sweep_ttl() >= 1
    with stack.pg.connection() as conn:
        rows = conn.execute("SELECT key FROM lg_store WHERE prefix = %s", (".".join(ns),))
        assert rows.fetchall() == [("kept",)]


def test_a_default_ttl_applies_to_puts_that_name_none(stack: amber.Stack) -> None:
    store, ns = AmberStore(stack, ttl={"default_ttl": 5.0}), ("ttl", uuid.uuid4().hex)
    store.put(ns, "k", {"v": 1})
    store.put(ns, "forever", {"v": 1}, ttl=None)
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT key, ttl_minutes FROM lg_store WHERE prefix = %s ORDER BY key",
            (".".join(ns),),
        ).fetchall()
    assert rows == [("forever", None), ("k", 5.0)]
