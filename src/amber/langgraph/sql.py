"""Every SQL statement of amber.langgraph (tables ``lg_*``, migration 5), in one place.

The saver and the store only do I/O; what each statement promises is written here.

Checkpoints: one ``lg_checkpoints`` row per checkpoint, keyed (thread, namespace,
checkpoint id) so the newest of a namespace, the page before a cursor and the
latest ten are one backward index scan, flat in history length. Its ``seq`` comes
from a sequence and changes whenever the row does: the Redis hot copy is used only
when it names the ``seq`` of the row PostgreSQL returns. A checkpoint names the
channel versions it needs (``channels``/``versions``, a projection of its body);
``PUT_CHECKPOINT`` writes only the new ones and checks in the same statement that the
others exist, so a checkpoint never commits pointing at a value that is gone.

Locks: a put holds its thread's advisory lock shared for its transaction; deleting
and pruning hold it exclusive. Retention therefore never runs between a put's check
and its commit, and a put that waited for retention sees what retention removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from amber.engines.overlap import Array
from amber.langgraph.records import Blob

THREAD_LOCK_SPACE = 0x6C6763
"""Advisory lock namespace of LangGraph threads ("lgc"; ``lg_put`` spells it 7104355)."""

LOCK_THREAD = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"

# -- checkpoints -------------------------------------------------------------------------
PUT_CHECKPOINT = """
SELECT out_seq, to_json(out_missing) FROM lg_put(%(thread_id)s::text, %(ns)s::text,
    %(checkpoint_id)s::text, %(run_id)s::text, %(metadata)s::jsonb, %(channels)s::text[],
    %(versions)s::text[], %(body)s::bytea, %(body_size)s::int, %(body_sha256)s::bytea,
    %(b_channel)s::text[], %(b_version)s::text[], %(b_type)s::text[], %(b_data)s::bytea[],
    %(b_size)s::int[], %(b_sha256)s::bytea[], %(r_channel)s::text[], %(r_version)s::text[],
    %(ttl)s::float8, %(witness)s::text, %(witness_seq)s::bigint)
"""
"""One checkpoint, in one statement and one commit (``lg_put``): take the
thread's lock shared; if a channel version the checkpoint names but does not bring is
missing (pruned since the run read it), write nothing and return ``(NULL, those
channels)`` (as JSON); else insert the new blobs and the row and return ``(seq, [])``.
Renews the thread's expiry: its own TTL, else ``%(ttl)s`` seconds when the saver has a
default. ``%(witness)s`` and ``%(witness_seq)s`` name a checkpoint that names every
version this one only names (the copy the caller holds), or are NULL (migration 14).
Every parameter is cast in the SQL, so it runs as ``engines.overlap.Overlapped``, its
arrays as ``overlap.Array``: built in one pass each, where psycopg adapts a list one
element at a time."""


def put_params(
    params: Mapping[str, Any], named: Sequence[Blob], new: Sequence[Blob], refs: Sequence[Blob]
) -> dict[str, Any]:
    """``PUT_CHECKPOINT``'s parameters: the checkpoint's (``params``), every value it names
    in its channels' order (``named``: ``channels`` and ``versions``), the ones it brings
    (``new``) and the ones it only names (``refs``), its lists as arrays."""
    channels, versions = _channels_and_versions(named)
    b_channel, b_version = _channels_and_versions(new)
    r_channel, r_version = _channels_and_versions(refs)
    return {
        **params,
        "channels": channels,
        "versions": versions,
        "b_channel": b_channel,
        "b_version": b_version,
        "b_type": Array.text([b.type for b in new]),
        "b_data": Array.bytea([b.data for b in new]),
        "b_size": Array.int4([b.size for b in new]),
        "b_sha256": Array.bytea([b.digest() for b in new]),
        "r_channel": r_channel,
        "r_version": r_version,
    }


def _channels_and_versions(blobs: Sequence[Blob]) -> tuple[Array, Array]:
    """The blobs' channels and versions as two ``text[]``, from the elements each blob
    encoded once (``Blob.elements``), however many puts name it."""
    wire = [b.elements() for b in blobs]
    return (
        Array.joined([b.channel for b in blobs], [w[0] for w in wire]),
        Array.joined([b.version for b in blobs], [w[1] for w in wire]),
    )


_ROWS = """
WITH c AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, seq, channels, versions,
        CASE WHEN seq = %(known)s THEN NULL ELSE body END AS body, body_size, body_sha256
    FROM lg_checkpoints {where}
    ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC
    LIMIT {limit}
),
refs AS (
    SELECT DISTINCT c.thread_id, c.checkpoint_ns, r.channel, r.version
    FROM c CROSS JOIN LATERAL unnest(c.channels, c.versions) AS r(channel, version)
    WHERE c.body IS NOT NULL
)
SELECT 'c', c.thread_id, c.checkpoint_ns, c.checkpoint_id, NULL, NULL, NULL, NULL::int,
    NULL, c.body, c.body_size, c.body_sha256, c.seq
FROM c
UNION ALL
SELECT 'b', b.thread_id, b.checkpoint_ns, NULL, b.channel, b.version, b.type, NULL,
    NULL, b.data, b.size, b.sha256, NULL
FROM refs JOIN lg_blobs b ON b.thread_id = refs.thread_id
    AND b.checkpoint_ns = refs.checkpoint_ns AND b.channel = refs.channel
    AND b.version = refs.version
UNION ALL
SELECT 'w', w.thread_id, w.checkpoint_ns, w.checkpoint_id, w.channel, w.task_id, w.type, w.idx,
    w.task_path, w.data, w.size, w.sha256, NULL
FROM c JOIN lg_writes w ON w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
    AND w.checkpoint_id = c.checkpoint_id
"""
"""Checkpoints newest first with, in the same snapshot, the blobs they need (each once)
and their pending writes. Rows: ``(kind, thread, ns, checkpoint id, channel, version or
task id, type, idx, task path, data, size, sha256, seq)``, kind ``c``, ``b`` or ``w``. A
checkpoint whose ``seq`` is ``%(known)s`` comes without body or blobs: the caller holds
that copy already. The limit is written into the text (``checkpoint_rows``), not passed:
with ``LIMIT $n`` a generic plan cannot know the scan stops after a row, so PostgreSQL,
once it had statistics, planned the statement again at every execution (about 0.25 ms
of a 0.45 ms ``get_tuple`` with a few threads of 3,000 checkpoints)."""


def checkpoint_rows(
    thread_id: str | None,
    ns: str | None,
    checkpoint_id: str | None = None,
    *,
    metadata: str | None = None,
    before: str | None = None,
    after_row: tuple[str, str, str] | None = None,
    limit: int = 1,
) -> tuple[str, dict[str, Any]]:
    """``_ROWS`` restricted to a thread, namespace, checkpoint, metadata filter (JSON text,
    matched by containment), ``before`` a checkpoint id, and past ``after_row`` (the last
    ``(checkpoint id, thread, ns)`` of the previous page), at most ``limit`` checkpoints.
    Returns ``(sql, params)``; the caller adds ``known``."""
    wheres: list[str] = []
    params: dict[str, Any] = {}
    if thread_id is not None:
        wheres.append("thread_id = %(thread_id)s")
        params["thread_id"] = thread_id
    if ns is not None:
        wheres.append("checkpoint_ns = %(ns)s")
        params["ns"] = ns
    if checkpoint_id is not None:
        wheres.append("checkpoint_id = %(checkpoint_id)s")
        params["checkpoint_id"] = checkpoint_id
    if metadata is not None:
        wheres.append("metadata @> %(metadata)s::jsonb")
        params["metadata"] = metadata
    if before is not None:
        wheres.append("checkpoint_id < %(before)s")
        params["before"] = before
    if after_row is not None:
        if thread_id is not None and ns is not None:
            wheres.append("checkpoint_id < %(after_id)s")  # the index's own order
        else:
            wheres.append(
                "(checkpoint_id, thread_id, checkpoint_ns)"
                " < (%(after_id)s, %(after_thread)s, %(after_ns)s)"
            )
        params.update(after_id=after_row[0], after_thread=after_row[1], after_ns=after_row[2])
    where = ("WHERE " + " AND ".join(wheres)) if wheres else ""
    return _ROWS.format(where=where, limit=int(limit)), params


_WRITES = """
INSERT INTO lg_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx,
    channel, type, data, size, sha256)
SELECT %(thread_id)b, %(ns)b, %(checkpoint_id)b, %(task_id)b, %(task_path)b, w.idx,
    w.channel, w.type, w.data, w.size, w.sha256
FROM unnest(%(idx)b::int[], %(channel)b::text[], %(type)b::text[], %(data)b::bytea[],
            %(size)b::int[], %(sha256)b::bytea[]) AS w(idx, channel, type, data, size, sha256)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO {action}
"""

INSERT_WRITES = _WRITES.format(action="NOTHING")
"""A task's writes; a write already stored under its (task, index) is kept (retries)."""

UPSERT_WRITES = _WRITES.format(
    action="UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, data = EXCLUDED.data,"
    " size = EXCLUDED.size, sha256 = EXCLUDED.sha256, task_path = EXCLUDED.task_path"
)
"""Writes to LangGraph's special channels (error, interrupt, resume, ...): the last wins."""

# -- retention -----------------------------------------------------------------------------
DELETE_THREADS = """
WITH c AS (DELETE FROM lg_checkpoints WHERE thread_id = ANY(%(threads)s) RETURNING 1),
b AS (DELETE FROM lg_blobs WHERE thread_id = ANY(%(threads)s) RETURNING 1),
w AS (DELETE FROM lg_writes WHERE thread_id = ANY(%(threads)s) RETURNING 1),
t AS (DELETE FROM lg_threads WHERE thread_id = ANY(%(threads)s))
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM w), (SELECT count(*) FROM b)
"""
"""Everything of these threads: checkpoints, writes, blobs, TTL. Returns the three counts."""

DELTA_THREADS = """
SELECT DISTINCT thread_id FROM lg_checkpoints WHERE thread_id = ANY(%s)
AND (metadata ? 'counters_since_delta_snapshot' OR metadata ? 'delta_writes_versioned')
"""
"""Threads whose graphs use a ``DeltaChannel``: their values live in the writes of older
checkpoints, so keeping only the newest would lose them."""

PRUNE_THREAD = """
WITH ranked AS (
    SELECT checkpoint_ns, checkpoint_id,
        row_number() OVER (PARTITION BY checkpoint_ns ORDER BY checkpoint_id DESC) AS n
    FROM lg_checkpoints WHERE thread_id = %(thread_id)s
),
gone AS (
    DELETE FROM lg_checkpoints c USING ranked r
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = r.checkpoint_ns
    AND c.checkpoint_id = r.checkpoint_id AND r.n > %(keep)s
    RETURNING c.checkpoint_ns, c.checkpoint_id
),
writes AS (
    DELETE FROM lg_writes w USING gone g
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = g.checkpoint_ns
    AND w.checkpoint_id = g.checkpoint_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM writes)
"""
"""Keep a thread's newest ``keep`` checkpoints per namespace; delete the rest and their
writes. Returns the two counts (blobs go in ``UNUSED_BLOBS``, after this commits to the
statement snapshot)."""

UNUSED_BLOBS = """
WITH used AS (
    SELECT DISTINCT c.checkpoint_ns, r.channel, r.version
    FROM lg_checkpoints c CROSS JOIN LATERAL unnest(c.channels, c.versions) AS r(channel, version)
    WHERE c.thread_id = %(thread_id)s
)
DELETE FROM lg_blobs b WHERE b.thread_id = %(thread_id)s AND NOT EXISTS (
    SELECT 1 FROM used u WHERE u.checkpoint_ns = b.checkpoint_ns AND u.channel = b.channel
    AND u.version = b.version)
"""
"""Blobs of a thread that no checkpoint of it names (run under the thread's exclusive lock,
so no put is between checking a blob and committing a checkpoint that names it)."""

ORPHAN_WRITES = """
DELETE FROM lg_writes w WHERE w.thread_id = %(thread_id)s
AND NOT EXISTS (
    SELECT 1 FROM lg_checkpoints c WHERE c.thread_id = w.thread_id
    AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)
AND w.checkpoint_id < (
    SELECT max(c.checkpoint_id) FROM lg_checkpoints c
    WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns)
"""
"""Writes whose checkpoint is gone, older than their namespace's newest checkpoint. Writes
of a checkpoint newer than every committed one are kept: a run saves a step's writes in
the background, and they may commit before their checkpoint does."""

RUN_THREADS = "SELECT DISTINCT thread_id FROM lg_checkpoints WHERE run_id = ANY(%s)"

DELETE_RUNS = """
WITH gone AS (
    DELETE FROM lg_checkpoints
    WHERE run_id = ANY(%(runs)s) AND thread_id = ANY(%(threads)s)
    RETURNING thread_id, checkpoint_ns, checkpoint_id
),
writes AS (
    DELETE FROM lg_writes w USING gone g
    WHERE w.thread_id = g.thread_id AND w.checkpoint_ns = g.checkpoint_ns
    AND w.checkpoint_id = g.checkpoint_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM writes)
"""
"""Checkpoints of these runs (in these locked threads) and their writes."""

COPY_THREAD = """
WITH c AS (
    INSERT INTO lg_checkpoints (thread_id, checkpoint_ns, checkpoint_id, run_id, metadata,
        channels, versions, body, body_size, body_sha256, created_at)
    SELECT %(target)s, checkpoint_ns, checkpoint_id, run_id, metadata, channels, versions,
        body, body_size, body_sha256, created_at
    FROM lg_checkpoints WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING RETURNING 1
),
b AS (
    INSERT INTO lg_blobs (thread_id, checkpoint_ns, channel, version, type, data, size, sha256)
    SELECT %(target)s, checkpoint_ns, channel, version, type, data, size, sha256
    FROM lg_blobs WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING RETURNING 1
),
w AS (
    INSERT INTO lg_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx,
        channel, type, data, size, sha256)
    SELECT %(target)s, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type,
        data, size, sha256
    FROM lg_writes WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM c), (SELECT count(*) FROM w), (SELECT count(*) FROM b)
"""
"""Every checkpoint, write and blob of one thread under another thread id (checksums do
not cover the thread id, so the copies verify as they are). Rows already there are kept."""

SET_TTL = """
INSERT INTO lg_threads (thread_id, ttl_seconds, expires_at)
VALUES (%(thread_id)s, %(ttl)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (thread_id) DO UPDATE
SET ttl_seconds = EXCLUDED.ttl_seconds, expires_at = EXCLUDED.expires_at
"""

CLEAR_TTL = """
UPDATE lg_threads SET ttl_seconds = NULL,
    expires_at = CASE WHEN %(default)s::float8 IS NULL THEN NULL
                      ELSE now() + make_interval(secs => %(default)s::float8) END
WHERE thread_id = %(thread_id)s
"""

THREAD_EXPIRY = "SELECT ttl_seconds, expires_at FROM lg_threads WHERE thread_id = %s"

EXPIRED_THREADS = """
SELECT thread_id FROM lg_threads WHERE expires_at <= now() ORDER BY expires_at LIMIT %s
"""

STILL_EXPIRED = "SELECT thread_id FROM lg_threads WHERE thread_id = ANY(%s) AND expires_at <= now()"
"""Of these threads, those still expired (asked again under their locks: a put renews)."""

THREADS_PAGE = """
SELECT DISTINCT thread_id FROM lg_checkpoints WHERE thread_id > %s ORDER BY thread_id LIMIT %s
"""
"""Every thread id, a page at a time (``gc`` walks them all)."""

# -- the store --------------------------------------------------------------------------------
# A namespace is its labels joined by "." (LangGraph refuses "." in a label), in ``prefix``;
# ``COLLATE "C"`` makes "everything under a.b" the index range ["a.b.", "a.b/"). Reads never
# return an item whose ``expires_at`` has passed, swept or not.

_LIVE = "(expires_at IS NULL OR expires_at > now())"

STORE_PUT = """
INSERT INTO lg_store AS s (prefix, key, value, size, ttl_minutes, expires_at)
VALUES (%(prefix)s, %(key)s, %(value)s::jsonb, %(size)s, %(ttl)s::float8,
    now() + make_interval(secs => %(ttl)s::float8 * 60))
ON CONFLICT (prefix, key) DO UPDATE SET
    value = EXCLUDED.value, size = EXCLUDED.size, version = nextval('lg_store_version'),
    updated_at = now(),
    ttl_minutes = EXCLUDED.ttl_minutes, expires_at = EXCLUDED.expires_at,
    created_at = CASE WHEN s.expires_at <= now() THEN now() ELSE s.created_at END
RETURNING version
"""
"""Create or replace an item (an expired one counts as new); returns its new version."""

STORE_DELETE = "DELETE FROM lg_store WHERE prefix = %s AND key = %s"

STORE_GET = f"""
WITH refreshed AS (
    UPDATE lg_store SET expires_at = now() + make_interval(secs => ttl_minutes * 60)
    WHERE prefix = %(prefix)s AND key = %(key)s AND %(refresh)s AND ttl_minutes IS NOT NULL
    AND expires_at > now()
)
SELECT version, created_at, updated_at,
    CASE WHEN size < %(inline)s THEN value END
FROM lg_store WHERE prefix = %(prefix)s AND key = %(key)s AND {_LIVE}
"""
"""A live item's version and times, and its value when its JSON is shorter than
``%(inline)s`` bytes (longer ones come from the Redis cache when it names this version);
renews its TTL when asked."""

STORE_VALUE = "SELECT value FROM lg_store WHERE prefix = %s AND key = %s AND version = %s"

STORE_SWEEP = "DELETE FROM lg_store WHERE expires_at <= now()"

STORE_NAMESPACES = f"SELECT DISTINCT prefix FROM lg_store WHERE {_LIVE} {{where}}"


def under(prefix: str) -> tuple[str, list[Any]]:
    """``prefix`` and every namespace below it, as an index range on ``prefix``."""
    if not prefix:
        return "TRUE", []
    return "(prefix = %s OR (prefix >= %s AND prefix < %s))", [prefix, prefix + ".", prefix + "/"]


_OPERATORS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def store_filter(filter: dict[str, Any], as_json: Any) -> tuple[str, list[Any]]:
    """SQL for a store filter, as ``InMemoryStore`` (the reference) reads it: a plain value
    matches an equal value (a missing field equals None), a mapping matches a mapping
    holding it, ``$eq``/``$ne`` compare values, ``$gt``/``$gte``/``$lt``/``$lte`` compare
    as numbers (numeric text included; anything else never matches). ``as_json`` turns a
    value into JSON text. Raises ``ValueError`` naming the operator it does not know."""
    clauses: list[str] = []
    params: list[Any] = []
    for field, wanted in filter.items():
        value = "COALESCE(value -> %s, 'null'::jsonb)"
        if isinstance(wanted, dict) and any(str(k).startswith("$") for k in wanted):
            for op, operand in wanted.items():
                if op in ("$eq", "$ne"):
                    clauses.append(f"{value} {'=' if op == '$eq' else '<>'} %s::jsonb")
                    params += [field, as_json(operand)]
                elif op in _OPERATORS:
                    clauses.append(f"lg_number(value -> %s) {_OPERATORS[op]} lg_number(%s::jsonb)")
                    params += [field, as_json(operand)]
                else:
                    raise ValueError(f"unknown filter operator {op!r}")
        elif isinstance(wanted, dict):
            clauses.append(f"jsonb_typeof({value}) = 'object' AND value -> %s @> %s::jsonb")
            params += [field, field, as_json(wanted)]
        else:
            clauses.append(f"{value} = %s::jsonb")
            params += [field, as_json(wanted)]
    return " AND ".join(clauses) or "TRUE", params


def store_search(
    prefix: str, filter: dict[str, Any] | None, as_json: Any, *, refresh: bool
) -> tuple[str, list[Any]]:
    """Live items under ``prefix`` matching ``filter``, most recently updated first, a page
    (the caller appends ``limit`` and ``offset``); renews the TTLs of those returned when
    ``refresh``. Rows: ``(prefix, key, value, created_at, updated_at)``."""
    scope, params = under(prefix)
    matched, more = store_filter(filter or {}, as_json)
    found = f"""
        SELECT prefix, key, value, created_at, updated_at, ttl_minutes FROM lg_store
        WHERE {scope} AND {_LIVE} AND {matched}
        ORDER BY updated_at DESC, prefix, key LIMIT %s OFFSET %s"""
    if not refresh:
        return f"SELECT prefix, key, value, created_at, updated_at FROM ({found}) f", params + more
    return (
        f"""
        WITH found AS ({found}),
        refreshed AS (
            UPDATE lg_store s SET expires_at = now() + make_interval(secs => s.ttl_minutes * 60)
            FROM found f WHERE s.prefix = f.prefix AND s.key = f.key AND s.ttl_minutes IS NOT NULL
        )
        SELECT prefix, key, value, created_at, updated_at FROM found
        ORDER BY updated_at DESC, prefix, key""",
        params + more,
    )
