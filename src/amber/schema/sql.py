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
    " l1_snapshot_keys, l1_snapshot_base"
)

INSERT_CHECKPOINT = f"""
INSERT INTO agent_checkpoints ({_CHECKPOINT_COLUMNS})
SELECT %(checkpoint_id)s::uuid, %(seq)s::bigint, %(writer)s::text, %(stock_ticker)s::varchar,
    %(agent_type)s::varchar, %(agent_id)s::varchar, %(analysis_id)s::uuid,
    %(checkpoint_time)s::timestamptz, %(progress_pct)s::numeric, %(current_subtask)s::varchar,
    %(completed_subtasks)s::text[], %(pending_subtasks)s::text[], %(failure_reason)s::text,
    %(retry_count)s::int, %(agent_version)s::varchar, %(state)s::bytea, %(state_sha256)s::text,
    %(state_size)s::int, %(l1_snapshot)s::bytea, %(l1_snapshot_hash)s::text,
    %(l1_snapshot_seq)s::bigint, %(l1_snapshot_size)s::int, %(l1_snapshot_epoch)s::text,
    %(l1_snapshot_keys)s::int, %(l1_snapshot_base)s::bigint
WHERE NOT EXISTS (
    SELECT 1 FROM agent_checkpoints
    WHERE analysis_id = %(analysis_id)s AND agent_type = %(agent_type)s AND seq >= %(seq)s)
ON CONFLICT (analysis_id, agent_type, seq) DO NOTHING
RETURNING id
"""
"""Add checkpoint ``seq`` unless it or a later one exists: a row back means it was written."""

NEWEST_SEQ = """
SELECT seq FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s
ORDER BY seq DESC LIMIT 1
"""

NEWEST_CHECKPOINT = """
SELECT seq, checkpoint_id, CASE WHEN seq = %s THEN NULL ELSE state END, state_sha256, state_size
FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s
ORDER BY seq DESC LIMIT 1
"""
"""The newest row, its state left out when the caller already holds that sequence (the
Redis copy it read): one round trip, and PostgreSQL decides which copy is current."""

OLDER_CHECKPOINTS = """
SELECT seq, checkpoint_id, state, state_sha256, state_size
FROM agent_checkpoints WHERE analysis_id = %s AND agent_type = %s AND seq < %s
ORDER BY seq DESC LIMIT %s
"""

CHECKPOINT_BY_ID = """
SELECT state, state_sha256, state_size, seq FROM agent_checkpoints WHERE checkpoint_id = %s
"""

SNAPSHOT_BY_CHECKPOINT_ID = """
SELECT l1_snapshot, l1_snapshot_size FROM agent_checkpoints WHERE checkpoint_id = %s
"""

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

CHECKPOINT_SUMMARIES = """
SELECT checkpoint_id, analysis_id, agent_type, seq, writer, checkpoint_time, progress_pct,
    current_subtask, cardinality(completed_subtasks) AS done,
    cardinality(completed_subtasks) + cardinality(pending_subtasks) AS total,
    failure_reason, retry_count, agent_version, l1_snapshot IS NOT NULL AS dual
FROM agent_checkpoints {where} ORDER BY id DESC LIMIT %s
"""

COUNT_CHECKPOINTS = "SELECT count(*) FROM agent_checkpoints WHERE analysis_id = %s"

ARCHIVE_CHECKPOINTS = f"""
INSERT INTO agent_checkpoints_archive ({_CHECKPOINT_COLUMNS}, created_at, archived_at)
SELECT {_CHECKPOINT_COLUMNS}, created_at, NOW() FROM agent_checkpoints WHERE analysis_id = %s
"""

DELETE_CHECKPOINTS = "DELETE FROM agent_checkpoints WHERE analysis_id = %s"

STATUSES = ("running", "paused", "completed", "failed", "expired")
"""running → paused ⇄ running → completed | failed; paused past its limit → expired."""

# -- analyses ------------------------------------------------------------------------------
ANALYSIS_COLUMNS = "analysis_id, stock_ticker, agents, status, preserve, created_at, updated_at"

INSERT_ANALYSIS = """
INSERT INTO analyses (analysis_id, stock_ticker, agents, status, preserve)
VALUES (%s, %s, %s, 'running', %s)
"""

ANALYSIS = f"SELECT {ANALYSIS_COLUMNS} FROM analyses WHERE analysis_id = %s"

ANALYSES = f"SELECT {ANALYSIS_COLUMNS} FROM analyses {{where}} ORDER BY created_at DESC LIMIT %s"

TRANSITION = """
UPDATE analyses SET status = %(to)s::varchar, updated_at = NOW(),
    finished_at = CASE WHEN %(to)s::varchar IN ('completed', 'failed') THEN NOW() END
WHERE analysis_id = %(analysis_id)s AND status = ANY(%(allowed)s)
RETURNING status
"""
"""Move an analysis between statuses, only from an allowed one: of two racing, one wins."""

SET_PRESERVE = "UPDATE analyses SET preserve = %s WHERE analysis_id = %s"

PAUSED_BEFORE = "SELECT analysis_id FROM analyses WHERE status = 'paused' AND updated_at < %s"

DOOMED = """
SELECT a.analysis_id FROM analyses a WHERE NOT a.preserve AND (
    (a.status IN ('failed', 'expired') AND a.updated_at < %s) OR a.status = 'completed')
AND EXISTS (SELECT 1 FROM agent_checkpoints c WHERE c.analysis_id = a.analysis_id)
"""
"""Analyses whose checkpoints retention may delete."""

RUNNER_LOCK_SPACE = 0x616D62
"""Advisory lock namespace of analysis runners: one runner per analysis."""

TRY_RUNNER_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(%s))"
RUNNER_UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(%s))"
RUNNER_HELD = """
SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
    AND classid = %s AND objid = hashtext(%s)::oid AND objsubid = 2)
"""
"""Whether a live session holds an analysis's runner lock (its process is alive)."""

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
SELECT reason, paused_by, paused_at, frozen_at, agents, resumed_at, resumed_by, error
FROM analysis_pauses WHERE analysis_id = %s ORDER BY id
"""

ATTACH_SNAPSHOT = """
UPDATE agent_checkpoints SET l1_snapshot = %s, l1_snapshot_hash = %s, l1_snapshot_seq = %s,
    l1_snapshot_size = %s, l1_snapshot_epoch = %s, l1_snapshot_keys = %s, l1_snapshot_base = NULL
WHERE checkpoint_id = %s
"""
"""Store an L1 snapshot with an existing checkpoint (``snapshot_on_checkpoint``)."""
