"""Every SQL statement on analyses, agent checkpoints and pauses, in one place.

The classes that run them (``Analyses``, ``AgentCheckpointer``, ``Retention``, the
snapshot readers) only do I/O; what a statement promises is written here, beside it.

The one rule that keeps work from being repeated: a checkpoint row is written by
``INSERT_CHECKPOINT`` only, and that statement is a compare-and-set. Each agent's
checkpoints are numbered ``seq`` = 1, 2, 3, ...; a writer that continued from
checkpoint ``b`` may only add ``b + 1``, and only while no row after ``b`` exists.
A stale writer (a pause racing a subtask, a runner that lost its lock) inserts
nothing and learns so from the empty ``RETURNING``; PostgreSQL's unique index on
``(analysis_id, agent_type, seq)`` settles two writers that race for the same number.
"""

from __future__ import annotations

# -- agent_checkpoints ---------------------------------------------------------------------
_CHECKPOINT_COLUMNS = (
    "checkpoint_id, seq, writer, stock_ticker, agent_type, agent_id, analysis_id,"
    " checkpoint_time, progress_pct, current_subtask, completed_subtasks, pending_subtasks,"
    " failure_reason, retry_count, agent_version, state, state_sha256, state_size,"
    " l1_snapshot, l1_snapshot_hash, l1_snapshot_seq, l1_snapshot_size, l1_snapshot_epoch,"
    " l1_snapshot_keys, l1_snapshot_base, state_base"
)

RUN_HOLDS = """(%(owner)s::text IS NULL OR EXISTS (
    SELECT 1 FROM analyses WHERE analysis_id = %(analysis_id)s AND lease_owner = %(owner)s
    FOR SHARE))"""
"""The fence of a run's write, inside the statement that makes it: the run ``owner`` still
holds the analysis's lease (a write made outside any run passes ``owner`` NULL). Once the
lease was taken over, given back, or cleared by the analysis's end, the write is refused.
``FOR SHARE`` locks the analysis's row until the write commits: a takeover racing it
waits for it (and then sees what it wrote), or commits first and the fence, read again on
the row's newest version, refuses it. Without the lock a write whose statement began
before the takeover committed still passed, and committed after it."""

INSERT_CHECKPOINT = f"""
INSERT INTO agent_checkpoints ({_CHECKPOINT_COLUMNS})
SELECT %(checkpoint_id)s::uuid, %(seq)s::bigint, %(writer)s::text, %(stock_ticker)s::varchar,
    %(agent_type)s::varchar, %(agent_id)s::varchar, %(analysis_id)s::uuid,
    %(checkpoint_time)s::timestamptz, %(progress_pct)s::numeric, %(current_subtask)s::varchar,
    %(completed_subtasks)s::text[], %(pending_subtasks)s::text[], %(failure_reason)s::text,
    %(retry_count)s::int, %(agent_version)s::varchar, %(state)s::bytea, %(state_sha256)s::text,
    %(state_size)s::int, %(l1_snapshot)s::bytea, %(l1_snapshot_hash)s::text,
    %(l1_snapshot_seq)s::bigint, %(l1_snapshot_size)s::int, %(l1_snapshot_epoch)s::text,
    %(l1_snapshot_keys)s::int, %(l1_snapshot_base)s::bigint, %(state_base)s::bigint
WHERE NOT EXISTS (
    SELECT 1 FROM agent_checkpoints
    WHERE analysis_id = %(analysis_id)s AND agent_type = %(agent_type)s AND seq >= %(seq)s)
AND (NOT EXISTS (SELECT 1 FROM analyses WHERE analysis_id = %(analysis_id)s) OR EXISTS (
    SELECT 1 FROM analyses WHERE analysis_id = %(analysis_id)s
    AND lease_owner IS NOT DISTINCT FROM %(writer)s AND status IN ('running', 'paused')
    FOR SHARE))
AND (%(state_base)s::bigint IS NULL OR EXISTS (
    SELECT 1 FROM agent_checkpoints WHERE analysis_id = %(analysis_id)s
    AND agent_type = %(agent_type)s AND seq = %(state_base)s AND checkpoint_id = %(base_id)s))
ON CONFLICT (analysis_id, agent_type, seq) DO NOTHING
RETURNING id, (SELECT status FROM analyses WHERE analysis_id = %(analysis_id)s)
"""
"""Add checkpoint ``seq`` unless it or a later one exists, or the writer does not hold the
analysis's lease: taken over, given back, or cleared when the analysis ended (the fence,
in the same statement, with the row lock ``RUN_HOLDS`` explains), or it is a delta record
whose base row (``state_base``, with id ``base_id``) is not there. A row back means it was
written, with the analysis's status beside it. Checkpoints of an agent outside any
analysis (no row) are not fenced."""

LEASE_OF = "SELECT lease_owner, status FROM analyses WHERE analysis_id = %s"

NEWEST_SEQ = """
SELECT seq FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s
ORDER BY seq DESC LIMIT 1
"""

HEADS = """
SELECT agent_type, max(seq) FROM agent_checkpoints WHERE analysis_id = %s GROUP BY agent_type
"""
"""Each agent's newest sequence in one analysis (an agent with none is not listed)."""

_BASE_ROW = """LEFT JOIN agent_checkpoints b ON b.analysis_id = c.analysis_id
    AND b.agent_type = c.agent_type AND b.seq = c.state_base"""
"""Beside each checkpoint row ``c``, the whole row ``b`` its delta record applies to (none
for a whole row)."""


def _records(state: str, rows: str) -> str:
    """A statement reading checkpoint rows ``c`` (a table or subquery) as
    ``checkpoints/delta.load`` takes them: sequence, id, ``state`` (an expression of
    ``c``), checksum, size and base, and beside a delta record its base row's id, state,
    checksum and size (one join, on the unique index)."""
    return f"""
SELECT c.seq, c.checkpoint_id, {state}, c.state_sha256, c.state_size, c.state_base,
    b.checkpoint_id, b.state, b.state_sha256, b.state_size
FROM {rows} c {_BASE_ROW}
"""


def _newest(where: str, limit: str) -> str:
    """One agent's rows (analysis, agent type) that match ``where``, newest first, up to
    ``limit``: a subquery for :func:`_records`."""
    return (
        "(SELECT * FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s"
        f"{where} ORDER BY seq DESC LIMIT {limit})"
    )


NEWEST_CHECKPOINT = _records(
    "CASE WHEN c.seq = %s OR octet_length(c.state) > %s THEN NULL ELSE c.state END",
    _newest("", "1"),
)
"""The newest row, its state left out when the caller holds that sequence (the Redis copy
it read) or when longer than the bound given (a Redis copy still on its way serves it
when current, else the row is read again): PostgreSQL decides which copy is current."""

OLDER_CHECKPOINTS = _records("c.state", _newest(" AND seq < %s", "%s")) + "ORDER BY c.seq DESC"

CHECKPOINTS_WITH_MEMORY = (
    _records("c.state", _newest(" AND seq <= %s AND l1_snapshot_hash = %s", "%s"))
    + "ORDER BY c.seq DESC"
)
"""The newest checkpoints of an agent taken with one memory (by its hash): where an agent
whose newest memory was lost rolls back to."""

CHECKPOINT_BY_ID = _records("c.state", "agent_checkpoints") + "WHERE c.checkpoint_id = %s"

SNAPSHOT_BY_CHECKPOINT_ID = """
SELECT analysis_id, agent_type, seq, l1_snapshot IS NOT NULL FROM agent_checkpoints
WHERE checkpoint_id = %s
"""
"""Where a checkpoint's snapshot is: its agent's chain (``SNAPSHOT_CHAIN``) up to its row."""

NEWEST_MEMORY = """
SELECT l1_snapshot_seq, l1_snapshot_hash, l1_snapshot_epoch FROM agent_checkpoints
WHERE analysis_id = %s AND agent_type = %s AND l1_snapshot IS NOT NULL ORDER BY seq DESC LIMIT 1
"""
"""The memory the newest checkpoint holding one was taken with: sequence, hash, epoch."""

SNAPSHOT_CHAIN = """
SELECT seq, l1_snapshot, l1_snapshot_size, l1_snapshot_hash, l1_snapshot_seq, l1_snapshot_epoch,
    l1_snapshot_base
FROM agent_checkpoints
WHERE analysis_id = %(a)s AND agent_type = %(t)s AND l1_snapshot IS NOT NULL AND seq < %(below)s
  AND seq >= (SELECT COALESCE(max(seq), 0) FROM agent_checkpoints
              WHERE analysis_id = %(a)s AND agent_type = %(t)s AND l1_snapshot IS NOT NULL
                AND l1_snapshot_base IS NULL AND seq < %(below)s)
ORDER BY seq
"""
"""The newest chain of L1 snapshots below checkpoint ``below``, oldest first: the last
whole snapshot, then the deltas stored after it (each applies to the row before)."""

SNAPSHOT_SEQS = """
SELECT l1_snapshot_seq FROM agent_checkpoints
WHERE analysis_id = %s AND agent_type = %s AND l1_snapshot IS NOT NULL
ORDER BY id DESC LIMIT %s
"""

AGENT_MAX_SNAPSHOT_SEQ = """
SELECT max(l1_snapshot_seq) FROM agent_checkpoints
WHERE agent_id = %s AND l1_snapshot IS NOT NULL
"""

_STEPS = "COALESCE(b.completed_subtasks, ARRAY[]::text[]) || c.completed_subtasks"
"""A row's completed subtasks: a delta row's column holds only those after its base's."""

_SUMMARY_COLUMNS = f"""c.checkpoint_id, c.analysis_id, c.agent_type, c.seq, c.writer,
    c.checkpoint_time, c.progress_pct, c.current_subtask,
    cardinality(array_remove({_STEPS}, 'amber:result')) AS done,
    cardinality(array_remove({_STEPS}, 'amber:result'))
    + cardinality(array_remove(c.pending_subtasks, 'amber:result')) AS total,
    c.failure_reason, c.retry_count, c.agent_version, c.l1_snapshot IS NOT NULL AS dual"""

CHECKPOINT_SUMMARIES = f"""
SELECT {_SUMMARY_COLUMNS} FROM agent_checkpoints c {_BASE_ROW} {{where}} ORDER BY c.id DESC LIMIT %s
"""
"""Summary rows, newest first; ``where`` filters on ``c`` (one analysis: ``WHERE
c.analysis_id = %s``)."""

LATEST_CHECKPOINTS = f"""
SELECT {_SUMMARY_COLUMNS}, {_STEPS} AS steps
FROM (SELECT DISTINCT ON (agent_type) * FROM agent_checkpoints WHERE analysis_id = %s
      ORDER BY agent_type, id DESC) c
{_BASE_ROW}
ORDER BY c.agent_type
"""
"""Each agent type's newest checkpoint of an analysis, as a summary with its steps done.
A function agent's ``amber:result`` (its return value's record) is no step: not counted."""

COUNT_CHECKPOINTS = "SELECT count(*) FROM agent_checkpoints WHERE analysis_id = %s"

CHECKPOINT_IDS_LIKE = """
SELECT checkpoint_id::text FROM agent_checkpoints WHERE checkpoint_id::text LIKE %s ESCAPE '\\'
ORDER BY 1 LIMIT %s
"""
"""Checkpoint ids that start with a prefix (a ``like_prefix`` pattern), a few."""

ARCHIVE_CHECKPOINTS = f"""
INSERT INTO agent_checkpoints_archive ({_CHECKPOINT_COLUMNS}, created_at, archived_at)
SELECT {_CHECKPOINT_COLUMNS}, created_at, NOW() FROM agent_checkpoints WHERE analysis_id = %s
"""

DELETE_CHECKPOINTS = "DELETE FROM agent_checkpoints WHERE analysis_id = %s"

STATUSES = ("running", "paused", "completed", "failed", "expired")
"""running → paused ⇄ running → completed | failed; paused past its limit → expired."""

# -- analyses ------------------------------------------------------------------------------
ANALYSIS_COLUMNS = (
    "analysis_id, stock_ticker, agents, status, preserve, created_at, updated_at, definition,"
    " input, lease_owner"
)

INSERT_ANALYSIS = """
INSERT INTO analyses (analysis_id, stock_ticker, agents, status, preserve, definition, input)
VALUES (%s, %s, %s, 'running', %s, %s, %s)
"""
"""A new analysis, ``running`` and unleased: queued for the first claimer."""

ANALYSIS = f"SELECT {ANALYSIS_COLUMNS} FROM analyses WHERE analysis_id = %s"

ANALYSES = f"SELECT {ANALYSIS_COLUMNS} FROM analyses {{where}} ORDER BY created_at DESC LIMIT %s"

TRANSITION = f"""
UPDATE analyses SET status = %(to)s::varchar, updated_at = NOW(),
    finished_at = CASE WHEN %(to)s::varchar IN ('completed', 'failed') THEN NOW() END
WHERE analysis_id = %(analysis_id)s AND status = ANY(%(allowed)s) AND {RUN_HOLDS}
RETURNING status
"""
"""Move an analysis between statuses, only from an allowed one: of two racing, one wins."""

SET_PRESERVE = "UPDATE analyses SET preserve = %s WHERE analysis_id = %s"

ANALYSIS_IDS_LIKE = """
SELECT analysis_id::text FROM analyses WHERE analysis_id::text LIKE %s ESCAPE '\\'
ORDER BY 1 LIMIT %s
"""
"""Analysis ids that start with a prefix (a ``like_prefix`` pattern), a few."""

AGENT_IDS_LIKE = """
SELECT DISTINCT e->>'agent_id' FROM analyses, jsonb_array_elements(agents) e
WHERE e->>'agent_id' LIKE %s ESCAPE '\\' ORDER BY 1 LIMIT %s
"""
"""Agent ids (of any analysis) that start with a prefix, a few."""

STATUS_COUNTS = "SELECT status, count(*) FROM analyses GROUP BY status"

RECENT_FAILURES = f"""
SELECT {ANALYSIS_COLUMNS} FROM analyses WHERE status = 'failed' AND updated_at >= %s
ORDER BY updated_at DESC LIMIT %s
"""
"""Analyses that failed since a time, newest first."""

PAUSED_BEFORE = "SELECT analysis_id FROM analyses WHERE status = 'paused' AND updated_at < %s"

DOOMED = """
SELECT a.analysis_id FROM analyses a WHERE NOT a.preserve AND (
    (a.status IN ('failed', 'expired') AND a.updated_at < %s) OR a.status = 'completed')
AND EXISTS (SELECT 1 FROM agent_checkpoints c WHERE c.analysis_id = a.analysis_id)
"""
"""Analyses whose checkpoints retention may delete."""

LIVENESS_SPACE = 0x616D62
"""Advisory lock namespace of live processes: each process that holds leases holds one
session lock ``(LIVENESS_SPACE, key)`` on a connection of its own, for its life. When
the process dies PostgreSQL sees the connection close and frees it: its leases lapse at
once instead of when they expire."""

_LIVE_KEYS = """ARRAY(SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted
    AND classid = %(space)s::oid AND objsubid = 2)"""

SERVER = "pg_postmaster_start_time()::text"
"""This server's incarnation: a restart, or a standby promoted in its place, changes it."""

_LOCK_GONE = f"""(a.lease_key IS NULL OR a.lease_key::bigint <> ALL ({_LIVE_KEYS}))"""

_CLAIMABLE = f"""(a.lease_owner IS NULL OR a.lease_expires < NOW()
    OR ({_LOCK_GONE} AND a.lease_server IS NOT DISTINCT FROM {SERVER}))"""

NO_LIVE_LEASE = _CLAIMABLE
"""The condition on an analysis row ``a`` (with ``%(space)s`` = ``LIVENESS_SPACE``) that
no live run holds it: what claims, ``has_runner`` and in-doubt listings all ask. No live
lease: never leased, released, expired, or its owner process is gone: its liveness lock
missing on the server incarnation the lease was last renewed on. A lock missing after a
restart or a failover proves nothing (every lock went with the old server): such a
lease lapses when it expires, unless its run renews it (and holds its lock) here."""

CLAIM = f"""
UPDATE analyses a SET lease_owner = %(owner)s, lease_key = %(key)s,
    lease_expires = NOW() + make_interval(secs => %(lease)s), lease_server = {SERVER},
    lease_token = CASE WHEN a.lease_owner = %(owner)s AND a.lease_token IS NOT NULL
                       THEN a.lease_token ELSE nextval('amber_lease_tokens') END
FROM (SELECT analysis_id, lease_owner FROM analyses WHERE analysis_id = %(aid)s FOR UPDATE) p
WHERE a.analysis_id = p.analysis_id AND (a.lease_owner = %(owner)s OR {_CLAIMABLE})
RETURNING a.status, p.lease_owner, a.lease_token
"""
"""Lease one analysis, whatever its status, unless a live owner holds it: (status, the
owner before, the run's fencing token); no row back means it is held. The row lock
orders two claimers."""

CLAIM_NEXT = f"""
WITH live AS (
    SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
        AND classid = %(space)s::oid AND objsubid = 2 AND objid = %(key)s::oid
        AND pid = %(pid)s) AS held),
claimed AS (
    UPDATE analyses a SET lease_owner = %(owner)s || ':' || substr(md5(random()::text), 1, 8),
        lease_key = %(key)s, lease_server = {SERVER},
        lease_expires = NOW() + make_interval(secs => %(lease)s),
        lease_token = nextval('amber_lease_tokens')
    FROM (SELECT c.analysis_id, c.lease_owner,
              COALESCE(c.lease_key::bigint = ANY ({_LIVE_KEYS}), FALSE) AS owner_alive
          FROM analyses c
          WHERE c.status = 'running' AND (c.lease_owner IS NULL OR c.lease_expires < NOW()
              OR ((c.lease_key IS NULL OR c.lease_key::bigint <> ALL ({_LIVE_KEYS}))
                  AND c.lease_server IS NOT DISTINCT FROM {SERVER}))
            AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(c.agents) e
                            WHERE NOT (e->>'agent_type' = ANY(%(known)s)))
            AND NOT (c.analysis_id::text = ANY(%(skip)s))
            AND (SELECT held FROM live)
          ORDER BY c.created_at LIMIT %(n)s FOR UPDATE SKIP LOCKED) p
    WHERE a.analysis_id = p.analysis_id
    RETURNING a.analysis_id AS claimed_id, a.lease_owner AS owner, p.lease_owner AS prior,
        (SELECT jsonb_object_agg(h.agent_type, h.seq) FROM (
            SELECT agent_type, max(seq) AS seq FROM agent_checkpoints
            WHERE analysis_id = a.analysis_id GROUP BY agent_type) h) AS heads,
        a.lease_token AS token, p.lease_owner IS NOT NULL AND p.owner_alive AS stuck,
        {", ".join("a." + c.strip() for c in ANALYSIS_COLUMNS.split(","))}),
noted AS (
    INSERT INTO analysis_events (analysis_id, kind, by, detail)
    SELECT claimed_id, CASE WHEN prior IS NULL THEN 'claimed' ELSE 'taken_over' END,
        owner, CASE WHEN stuck THEN jsonb_build_object('taken_over_from', prior, 'stuck', TRUE)
                    WHEN prior IS NOT NULL THEN jsonb_build_object('taken_over_from', prior)
               END
    FROM claimed)
SELECT live.held, c.* FROM live LEFT JOIN claimed c ON TRUE
"""
"""Lease up to ``n`` queued analyses whose agents this worker knows, oldest first; rows
another worker is claiming are skipped, not waited for. Each lease's owner is
``owner:token``, new for every claim: one run, one owner, so a run whose lease lapsed is
fenced off even from a later run of the same worker.

Nothing is claimed unless the claimer's liveness lock ``%(key)s`` is held by its liveness
connection (backend ``%(pid)s``): after a PostgreSQL restart that connection can look open
with its lock gone, and a lease naming a lock nobody holds is anyone's to take. The first
column of every row says whether the lock is held; the claimed rows follow it (none: one
row of NULLs): analysis id, lease owner, prior owner, each agent's newest checkpoint
sequence (``heads``), the run's fencing token, whether the run it takes over from was
stuck (its process alive, its lease unrenewed for ``stuck_seconds``), then
``ANALYSIS_COLUMNS``. Each claim's ``claimed`` or ``taken_over`` event (``stuck`` in its
detail when so) is written by the same statement."""

RENEW = f"""
UPDATE analyses SET lease_expires = NOW() + make_interval(secs => %(lease)s),
    lease_key = CASE WHEN h.held THEN %(key)s ELSE lease_key END,
    lease_server = CASE WHEN h.held THEN {SERVER} ELSE lease_server END
FROM (SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
    AND classid = %(space)s::oid AND objsubid = 2 AND objid = %(key)s::oid) AS held) h
WHERE lease_owner = ANY(%(owners)s) RETURNING lease_owner, status
"""
"""Extend every lease this process still holds; a lease missing from the answer was lost.
Where this process's liveness lock ``%(key)s`` is held, the leases are marked as of this
server incarnation (after a failover, the lock taken again on the new primary)."""

RELEASE = """
UPDATE analyses SET lease_owner = NULL, lease_key = NULL, lease_expires = NULL,
    lease_token = NULL
WHERE analysis_id = %s AND lease_owner = %s
"""

LEASE_HELD = f"""
SELECT a.lease_owner FROM analyses a WHERE a.analysis_id = %(aid)s AND a.lease_owner IS NOT NULL
    AND NOT {_CLAIMABLE}
"""
"""The owner of a live lease on the analysis, if one is held."""

QUEUED_COUNT = f"SELECT count(*) FROM analyses a WHERE a.status = 'running' AND {_CLAIMABLE}"
"""Running analyses no live run holds: queued for a worker."""

IN_FLIGHT_COUNT = f"SELECT count(*) FROM analyses a WHERE a.status = 'running' AND NOT {_CLAIMABLE}"
"""Running analyses a live run holds: runs in flight."""

LIVENESS_LOCK = "SELECT pg_try_advisory_lock(%s, %s)"

# -- analysis_results and analysis_events --------------------------------------------------
_RESULT_UPSERT = """ON CONFLICT (analysis_id, agent_id) DO UPDATE SET status = EXCLUDED.status,
    result = EXCLUDED.result, steps = EXCLUDED.steps, finished_at = NOW()"""
"""A result written again (a rerun) replaces the one kept."""

SAVE_RESULT = f"""
INSERT INTO analysis_results (analysis_id, agent_id, agent_type, status, result, steps)
VALUES (%s, %s, %s, %s, %s, %s)
{_RESULT_UPSERT}
"""
"""An agent's outcome, kept after its checkpoints are purged; written again on a rerun."""

RESULTS = """
SELECT agent_type, agent_id, status, result, steps, finished_at FROM analysis_results
WHERE analysis_id = %s ORDER BY agent_type
"""

DELETE_RESULTS = "DELETE FROM analysis_results WHERE analysis_id = %s"

FINISH = f"""
WITH moved AS (
    UPDATE analyses SET status = %(to)s::varchar, updated_at = NOW(), finished_at = NOW(),
        lease_owner = CASE WHEN lease_owner = %(owner)s THEN NULL ELSE lease_owner END,
        lease_key = CASE WHEN lease_owner = %(owner)s THEN NULL ELSE lease_key END,
        lease_expires = CASE WHEN lease_owner = %(owner)s THEN NULL ELSE lease_expires END,
        lease_token = CASE WHEN lease_owner = %(owner)s THEN NULL ELSE lease_token END
    WHERE analysis_id = %(analysis_id)s AND status = 'running'
        AND (%(owner)s::text IS NULL OR lease_owner = %(owner)s)
    RETURNING analysis_id),
kept AS (
    INSERT INTO analysis_results (analysis_id, agent_id, agent_type, status, result, steps)
    SELECT m.analysis_id, r->>'agent_id', r->>'agent_type', r->>'status', r->'result',
        ARRAY(SELECT jsonb_array_elements_text(r->'steps'))
    FROM moved m, jsonb_array_elements(%(results)s::jsonb) r
    {_RESULT_UPSERT}),
noted AS (
    INSERT INTO analysis_events (analysis_id, kind, by, detail)
    SELECT analysis_id, %(to)s::varchar, %(by)s::text, %(detail)s::jsonb FROM moved),
purged AS (
    DELETE FROM agent_checkpoints WHERE %(purge)s::boolean
        AND analysis_id = %(analysis_id)s AND EXISTS (SELECT 1 FROM moved))
SELECT count(*) FROM moved
"""
"""End a running analysis in one statement: its status (completed or failed), each
agent's result (a JSON list of {agent_id, agent_type, status, result, steps}), the event,
and with ``purge`` its checkpoints deleted, the lease given back; nothing at all unless it
was running and, with ``owner``, that run still holds its lease (the count says 0 then)."""

ADD_EVENT = "INSERT INTO analysis_events (analysis_id, kind, by, detail) VALUES (%s, %s, %s, %s)"

RUN_EVENT = f"""
INSERT INTO analysis_events (analysis_id, kind, by, detail)
SELECT %(analysis_id)s::uuid, %(kind)s::varchar, %(by)s::text, %(detail)s::jsonb
WHERE {RUN_HOLDS}
"""
"""An event a run adds (released, rolled_back, paused by it), fenced by its lease."""

EVENTS = "SELECT at, kind, by, detail FROM analysis_events WHERE analysis_id = %s ORDER BY id"

# -- analysis_pauses -----------------------------------------------------------------------
INSERT_PAUSE = """
INSERT INTO analysis_pauses (analysis_id, reason, paused_by, agents)
VALUES (%s, %s, %s, '[]'::jsonb) RETURNING id, paused_at
"""
"""A pause as requested; its agents are filled in when their pause checkpoints are written."""

FREEZE_PAUSE = """
UPDATE analysis_pauses SET agents = %s, frozen_at = NOW(), error = NULL
WHERE id = (SELECT id FROM analysis_pauses WHERE analysis_id = %s AND resumed_at IS NULL
            ORDER BY id DESC LIMIT 1)
RETURNING reason, paused_at
"""

PAUSE_FAILED = """
UPDATE analysis_pauses SET error = %s
WHERE id = (SELECT id FROM analysis_pauses WHERE analysis_id = %s AND resumed_at IS NULL
            ORDER BY id DESC LIMIT 1)
"""

OPEN_PAUSE = """
SELECT reason, paused_by, paused_at, frozen_at FROM analysis_pauses
WHERE analysis_id = %s AND resumed_at IS NULL ORDER BY id DESC LIMIT 1
"""

RESUME_PAUSE = """
UPDATE analysis_pauses SET resumed_at = NOW(), resumed_by = %s, resume_report = %s
WHERE analysis_id = %s AND resumed_at IS NULL
"""

PAUSES = """
SELECT reason, paused_by, paused_at, frozen_at, agents, resumed_at, resumed_by, error,
    resume_report
FROM analysis_pauses WHERE analysis_id = %s ORDER BY id
"""

ATTACH_SNAPSHOT = """
UPDATE agent_checkpoints SET l1_snapshot = %s, l1_snapshot_hash = %s, l1_snapshot_seq = %s,
    l1_snapshot_size = %s, l1_snapshot_epoch = %s, l1_snapshot_keys = %s, l1_snapshot_base = NULL
WHERE checkpoint_id = %s
"""
"""Store an L1 snapshot with an existing checkpoint (``snapshot_on_checkpoint``)."""


def like_prefix(prefix: str) -> str:
    """A ``LIKE ... ESCAPE '\\'`` pattern matching text that starts with ``prefix``."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def text_array(values: list[str]) -> str:
    """``values`` as a PostgreSQL array literal, for a ``%s::text[]`` parameter: one string
    built at C speed, where psycopg's list dumper quotes element by element (a function
    agent's thousand step names cost more to dump than to store)."""
    if not values:
        return "{}"
    whole = "".join(values)
    if "\\" in whole or '"' in whole:
        values = [v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    return '{"' + '","'.join(values) + '"}'
