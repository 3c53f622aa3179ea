"""``AmberStore``: LangGraph's ``BaseStore`` on PostgreSQL, large values cached in Redis.

PostgreSQL holds every item (JSONB, so filters run in SQL) with a version that changes
on every write. A value stored in ``INLINE_BYTES`` or more is also kept in Redis, sealed
(``codec.seal``) under its version; a read asks PostgreSQL for the item's version (one
round trip, which also renews its TTL) and takes the cached value only when it names
that version. Semantics follow LangGraph's ``InMemoryStore`` (the reference): filters
compare numbers as numbers, TTLs are fractional minutes, renewed by reads when asked,
and an expired item is never returned, swept or not.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import orjson
import psycopg
import redis
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from amber import codec
from amber.engines.aio import in_thread
from amber.errors import AmberError, InvalidIdentifier, InvalidValue, StoreUnavailable
from amber.langgraph import sql as lsql
from amber.langgraph.owned import OwnsStack, on_own_stack
from amber.memory.snapshot import write_sealed
from amber.stack import Stack

log = logging.getLogger("amber.langgraph")

INLINE_BYTES = 2048
"""Values shorter than this (as JSON) come straight from PostgreSQL; longer ones are cached."""

MAX_KEY = 1024
"""Longest item key, and longest namespace (labels joined by '.')."""


class InvalidNamespace(InvalidIdentifier, InvalidNamespaceError):
    """A namespace LangGraph and amber refuse: empty, a label not a non-empty string, a
    label holding '.' or NUL, or an item under the reserved root "langgraph"."""


def _namespace(namespace: object, *, item: bool) -> str:
    if not isinstance(namespace, tuple):
        raise InvalidNamespace("namespace must be a tuple of strings", field="namespace")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidNamespace(
                f"namespace label {label!r} must be a non-empty string without '.' or NUL",
                field="namespace",
                value=namespace,
            )
    if item and (not namespace or namespace[0] == "langgraph"):
        raise InvalidNamespace(
            "an item's namespace must be non-empty and not start with 'langgraph'",
            field="namespace",
            value=namespace,
        )
    joined = ".".join(namespace)
    if len(joined) > MAX_KEY:
        raise InvalidNamespace(f"namespace is longer than {MAX_KEY} characters", field="namespace")
    return joined


def _key(key: object) -> str:
    if not isinstance(key, str) or "\x00" in key or len(key) > MAX_KEY:
        raise InvalidValue(
            f"key must be a string without NUL of at most {MAX_KEY} characters", field="key"
        )
    return key


def _json(value: object, field: str) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError as exc:
        raise InvalidValue(f"{field} is not JSON: {exc}", field=field) from None
    if "\\u0000" in text:
        raise InvalidValue(f"{field} holds a NUL character, which JSONB refuses", field=field)
    return text


def _ttl(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not (0 < ttl < math.inf):
        raise InvalidValue("ttl must be a positive number of minutes, or None", field="ttl")
    return float(ttl)


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidValue(f"{field} must be a non-negative integer", field=field)
    return value


def _check_filter(filter: object) -> dict[str, Any]:
    if filter is None:
        return {}
    if not isinstance(filter, dict) or not all(isinstance(k, str) for k in filter):
        raise InvalidValue("filter must map field names to values", field="filter")
    for name, wanted in filter.items():
        if isinstance(wanted, dict) and any(str(k).startswith("$") for k in wanted):
            for op, operand in wanted.items():
                if op in ("$gt", "$gte", "$lt", "$lte") and not _numeric(operand):
                    raise InvalidValue(
                        f"filter {name!r}: {op} compares numbers, got {operand!r}",
                        field=f"filter.{name}",
                    )
                if op not in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"):
                    raise InvalidValue(
                        f"filter {name!r}: unknown operator {op!r}", field=f"filter.{name}"
                    )
    return filter


def _numeric(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return math.isfinite(value)
    if isinstance(value, str):
        try:
            return math.isfinite(float(value))
        except ValueError:
            return False
    return False


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p in ("*", n) for p, n in zip(path, part, strict=True)) if path else True


class AmberStore(OwnsStack, BaseStore):
    """LangGraph's long-term memory store on amber: PostgreSQL, with Redis caching large
    values (used only when they name the item's current version). ``AmberStore(stack)``
    uses an open stack; ``AmberStore.from_env()`` opens and owns one. ``ttl`` is
    LangGraph's ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``)."""

    supports_ttl = True

    def __init__(self, stack: Stack, *, ttl: TTLConfig | None = None) -> None:
        self.redis = stack.redis
        self.pg = stack.pg
        self.keys = stack.keys
        self.ttl_config = ttl
        self.cache_ttl_ms = stack.settings.checkpoint_backup_ttl * 1000
        if ttl is not None and ttl.get("default_ttl") is not None:
            _ttl(ttl.get("default_ttl"))

    @classmethod
    def from_env(cls, *, ttl: TTLConfig | None = None, **connect_args: Any) -> AmberStore:
        """A store on a stack it opens as ``amber.connect(**connect_args)`` does."""
        return on_own_stack(lambda s: cls(s, ttl=ttl), connect_args)

    def setup(self) -> None:
        """Nothing to do: the stack applied amber's migrations. Kept for ``PostgresStore`` code."""

    # -- LangGraph's API, with amber's checks first ----------------------------------------
    def get(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        """The live item at ``namespace``/``key``, or None; renews its TTL unless told not to."""
        _namespace(namespace, item=False)
        return super().get(namespace, _key(key), refresh_ttl=refresh_ttl)

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """Create or replace an item; ``ttl`` in minutes (fractions allowed), None: forever."""
        _namespace(namespace, item=True)
        super().put(namespace, _key(key), value, index, ttl=ttl)

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        """Delete an item (nothing if there is none)."""
        _namespace(namespace, item=False)
        super().delete(namespace, _key(key))

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        """Live items under a namespace prefix matching ``filter``, newest update first."""
        _namespace(namespace_prefix, item=False)
        return super().search(
            namespace_prefix,
            query=query,
            filter=filter,
            limit=limit,
            offset=offset,
            refresh_ttl=refresh_ttl,
        )

    def list_namespaces(
        self,
        *,
        prefix: tuple[str, ...] | None = None,
        suffix: tuple[str, ...] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """Namespaces holding live items, sorted, matching ``prefix``/``suffix`` ('*' is any
        one label), cut to ``max_depth`` labels."""
        for path in (prefix or (), suffix or ()):
            _namespace(tuple(p if p != "*" else "x" for p in path), item=False)
        return super().list_namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )

    # -- the batch every call goes through ---------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; each result at its operation's position."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._namespaces(op))
            else:
                raise InvalidValue(f"unknown store operation {type(op).__name__}", field="op")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """As :meth:`batch`, in a worker thread (``ops`` read first, on the loop)."""
        return await self._abatch(list(ops))

    _abatch = in_thread(batch)
    aget = in_thread(get)
    aput = in_thread(put)
    adelete = in_thread(delete)
    asearch = in_thread(search)
    alist_namespaces = in_thread(list_namespaces)

    def sweep_ttl(self) -> int:
        """Delete expired items (reads never return them anyway); returns how many."""
        with self.pg.connection() as conn:
            return conn.execute(lsql.STORE_SWEEP).rowcount

    def _put(self, op: PutOp) -> None:
        prefix, key = _namespace(op.namespace, item=op.value is not None), _key(op.key)
        cache_key = self.keys.lg_store_item(op.namespace, key)
        if op.value is None:
            with self.pg.connection() as conn:
                conn.execute(lsql.STORE_DELETE, (prefix, key))
            self._uncache(cache_key)
            return
        if not isinstance(op.value, Mapping) or not all(isinstance(k, str) for k in op.value):
            raise InvalidValue("value must be a mapping with string keys", field="value")
        text = _json(dict(op.value), "value")
        params = {
            "prefix": prefix,
            "key": key,
            "value": text,
            "size": len(text),
            "ttl": _ttl(op.ttl),
        }
        try:
            with self.pg.connection() as conn:
                row = conn.execute(lsql.STORE_PUT, params).fetchone()
        except psycopg.DataError as exc:
            raise InvalidValue(f"item cannot be stored: {exc}".strip(), field="value") from None
        assert row is not None
        if len(text) >= INLINE_BYTES:
            self._cache(cache_key, int(row[0]), text.encode())
        else:
            self._uncache(cache_key)

    def _cache(self, cache_key: str, version: int, raw: bytes) -> None:
        try:
            write_sealed(
                self.redis,
                "store",
                [(cache_key, codec.seal(version, raw), version, self.cache_ttl_ms)],
            )
        except StoreUnavailable as exc:  # the next read takes the value from PostgreSQL
            log.warning("store cache not written: %s", exc)

    def _uncache(self, cache_key: str) -> None:
        try:
            self.redis.delete(cache_key)
        except (redis.RedisError, OSError) as exc:  # a stale copy is never used anyway
            log.warning("store cache not cleared: %s", exc)

    def _get(self, op: GetOp) -> Item | None:
        prefix, key = _namespace(op.namespace, item=False), _key(op.key)
        params = {"prefix": prefix, "key": key, "refresh": bool(op.refresh_ttl)}
        for _ in range(3):  # a large value replaced between the two reads: read again
            with self.pg.connection() as conn:
                row = conn.execute(lsql.STORE_GET, {**params, "inline": INLINE_BYTES}).fetchone()
            if row is None:
                return None
            version, created, updated, value = row
            if value is None:
                value = self._large(op.namespace, prefix, key, int(version))
            if value is not None:
                return Item(
                    value=value,
                    key=key,
                    namespace=op.namespace,
                    created_at=created,
                    updated_at=updated,
                )
        raise StoreUnavailable("store item keeps changing while it is read", key=key)

    def _large(
        self, namespace: tuple[str, ...], prefix: str, key: str, version: int
    ) -> dict[str, Any] | None:
        cache_key = self.keys.lg_store_item(namespace, key)
        try:
            blob = self.redis.get(cache_key)
            if blob is not None:
                seq, raw = codec.unseal(bytes(blob))  # type: ignore[arg-type]
                if seq == version:
                    doc = orjson.loads(raw)
                    if isinstance(doc, dict):
                        return doc
        except (AmberError, orjson.JSONDecodeError) as exc:
            log.warning("store cache of %s/%s not trusted: %s", prefix, key, exc)
        except (redis.RedisError, OSError) as exc:
            log.warning("store cache of %s/%s not read: %s", prefix, key, exc)
        with self.pg.connection() as conn:
            row = conn.execute(lsql.STORE_VALUE, (prefix, key, version)).fetchone()
        if row is None:  # replaced or deleted since: the caller asks again
            return None
        value: dict[str, Any] = row[0]
        self._cache(cache_key, version, orjson.dumps(value))
        return value

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = _namespace(op.namespace_prefix, item=False)
        wanted = _check_filter(op.filter)
        limit, offset = _count(op.limit, "limit"), _count(op.offset, "offset")
        query, params = lsql.store_search(
            prefix, wanted, lambda v: _json(v, "filter"), refresh=bool(op.refresh_ttl)
        )
        with self.pg.connection() as conn:
            rows = conn.execute(query, [*params, limit, offset]).fetchall()
        return [
            SearchItem(
                namespace=tuple(p.split(".")),
                key=k,
                value=v,
                created_at=c,
                updated_at=u,
            )
            for p, k, v, c, u in rows
        ]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        limit, offset = _count(op.limit, "limit"), _count(op.offset, "offset")
        if op.max_depth is not None:
            _count(op.max_depth, "max_depth")
        conditions = tuple(op.match_conditions or ())
        where = ""
        params: list[Any] = []
        for condition in conditions:
            if condition.match_type not in ("prefix", "suffix"):
                raise InvalidValue(
                    f"unknown match type {condition.match_type!r}", field="match_type"
                )
            literal = []
            for label in condition.path if condition.match_type == "prefix" else ():
                if label == "*":
                    break
                literal.append(label)
            if literal and not where:
                scope, params = lsql.under(".".join(literal))
                where = f"AND {scope}"
        with self.pg.connection() as conn:
            rows = conn.execute(lsql.STORE_NAMESPACES.format(where=where), params).fetchall()
        found = {tuple(r[0].split(".")) for r in rows}
        kept = [ns for ns in found if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            kept = list({ns[: op.max_depth] for ns in kept})
        return sorted(kept)[offset : offset + limit]
