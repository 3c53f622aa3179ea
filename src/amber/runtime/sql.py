"""Every SQL statement on step intents and reviews, in one place.

A write that decides something (a step's resolution, a review's decision) is one guarded
UPDATE: of two racing, exactly one changes the row, and the other learns so from the
empty ``RETURNING``.
"""

from __future__ import annotations

from amber.schema.sql import NO_LIVE_LEASE, RUN_HOLDS

# -- step_intents --------------------------------------------------------------------------
_INTENT_COLUMNS = (
    "step_id, analysis_id, agent_id, agent_type, step_key, fn, status, result, started_at,"
    " resolved_at, resolved_by"
)

BEGIN_INTENT = f"""
WITH fresh AS (
    INSERT INTO step_intents (step_id, analysis_id, agent_id, agent_type, step_key, fn)
    SELECT %(step_id)s::uuid, %(analysis_id)s::uuid, %(agent_id)s::varchar,
        %(agent_type)s::varchar, %(key)s::text, %(fn)s::text
    WHERE {RUN_HOLDS}
    ON CONFLICT (analysis_id, agent_id, step_key) DO NOTHING
    RETURNING {_INTENT_COLUMNS}, TRUE AS fresh)
SELECT * FROM fresh
UNION ALL
SELECT {_INTENT_COLUMNS}, FALSE FROM step_intents
WHERE analysis_id = %(analysis_id)s AND agent_id = %(agent_id)s AND step_key = %(key)s
  AND NOT EXISTS (SELECT 1 FROM fresh) AND {RUN_HOLDS}
"""
"""Record that an at-most-once step is about to call out, durably, before it does; or
find the record an earlier attempt left (``fresh`` false: that attempt is in doubt).
Nothing back: the run ``owner`` no longer holds the analysis (fenced)."""

FINISH_INTENT = "UPDATE step_intents SET status = 'done', resolved_at = NOW() WHERE step_id = %s"

RESOLVE_INTENT = f"""
UPDATE step_intents SET status = %(to)s, result = %(result)s, resolved_at = NOW(),
    resolved_by = %(by)s
WHERE step_id = %(step_id)s AND status IN ('started', 'done')
RETURNING {_INTENT_COLUMNS}, FALSE AS fresh
"""
"""Decide an in-doubt step once: ``rerun`` it, or ``skip`` it with a given result."""

INTENT = f"SELECT {_INTENT_COLUMNS}, FALSE AS fresh FROM step_intents WHERE step_id = %s"

IN_DOUBT = f"""
SELECT {_INTENT_COLUMNS}, FALSE AS fresh FROM step_intents i
WHERE status = 'started' AND (%(aid)s::uuid IS NULL OR analysis_id = %(aid)s::uuid)
  AND EXISTS (SELECT 1 FROM analyses a WHERE a.analysis_id = i.analysis_id
              AND {NO_LIVE_LEASE})
ORDER BY started_at LIMIT %(limit)s
"""
"""Steps started and never recorded, of analyses no run holds: each is in doubt."""

COUNT_IN_DOUBT = f"""
SELECT count(*) FROM step_intents i
WHERE status = 'started' AND EXISTS (SELECT 1 FROM analyses a
    WHERE a.analysis_id = i.analysis_id AND {NO_LIVE_LEASE})
"""

STEP_IDS_LIKE = """
SELECT step_id::text FROM step_intents WHERE step_id::text LIKE %s ESCAPE '\\'
ORDER BY 1 LIMIT %s
"""
"""Step ids that start with a prefix (a ``like_prefix`` pattern), a few."""

# -- reviews -------------------------------------------------------------------------------
_REVIEW_COLUMNS = (
    "review_id, analysis_id, agent_id, agent_type, step_key, kind, payload, deadline,"
    " on_deadline, status, decision, decided_by, decided_at, created_at"
)

OPEN_REVIEW = f"""
WITH fresh AS (
    INSERT INTO reviews (review_id, analysis_id, agent_id, agent_type, step_key, kind, payload,
                         deadline, on_deadline)
    SELECT %(review_id)s::uuid, %(analysis_id)s::uuid, %(agent_id)s::varchar,
        %(agent_type)s::varchar, %(key)s::text, %(kind)s::varchar, %(payload)s::jsonb,
        %(deadline)s::timestamptz, %(on_deadline)s::varchar
    WHERE {RUN_HOLDS}
    ON CONFLICT (analysis_id, agent_id, step_key) DO NOTHING
    RETURNING {_REVIEW_COLUMNS})
SELECT * FROM fresh
UNION ALL
SELECT {_REVIEW_COLUMNS} FROM reviews
WHERE analysis_id = %(analysis_id)s AND agent_id = %(agent_id)s AND step_key = %(key)s
  AND NOT EXISTS (SELECT 1 FROM fresh) AND {RUN_HOLDS}
"""
"""The review a waiting step asks for: created the first time, found every time after;
nothing back when the run ``owner`` no longer holds the analysis (fenced)."""

DECIDE = f"""
UPDATE reviews SET status = %(status)s, decision = %(decision)s, decided_by = %(by)s,
    decided_at = NOW()
WHERE review_id = %(review_id)s AND status = 'pending'
RETURNING {_REVIEW_COLUMNS}
"""
"""Decide a pending review, once: a decided review is never changed."""

REVIEW = f"SELECT {_REVIEW_COLUMNS} FROM reviews WHERE review_id = %s"

REVIEWS = f"""
SELECT {_REVIEW_COLUMNS} FROM reviews
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(aid)s::uuid IS NULL OR analysis_id = %(aid)s::uuid)
ORDER BY created_at LIMIT %(limit)s
"""

COUNT_REVIEWS = "SELECT count(*) FROM reviews WHERE status = %s"

REVIEW_IDS_LIKE = """
SELECT review_id::text FROM reviews WHERE review_id::text LIKE %s ESCAPE '\\'
ORDER BY 1 LIMIT %s
"""
"""Review ids that start with a prefix (a ``like_prefix`` pattern), a few."""

DUE_REVIEWS = """
SELECT review_id FROM reviews WHERE status = 'pending' AND deadline <= NOW()
ORDER BY deadline LIMIT %s
"""

LOCK_REVIEWED_ANALYSIS = """
SELECT 1 FROM analyses WHERE analysis_id = (SELECT analysis_id FROM reviews WHERE review_id = %s)
FOR UPDATE
"""
"""Taken first by a decision and by a pause for review: the two never interleave."""

LOCK_ANALYSIS = "SELECT status FROM analyses WHERE analysis_id = %s FOR UPDATE"

PAUSE_FOR_REVIEW = """
UPDATE analyses SET status = 'paused', updated_at = NOW()
WHERE analysis_id = %s AND status = 'running'
  AND EXISTS (SELECT 1 FROM reviews WHERE analysis_id = %s AND status = 'pending')
RETURNING status
"""
"""Pause a running analysis for review, unless every review it waits for is decided."""

RESUME_AFTER_REVIEW = """
UPDATE analyses SET status = 'running', updated_at = NOW()
WHERE analysis_id = %s AND status = 'paused'
  AND (SELECT reason FROM analysis_pauses WHERE analysis_id = %s AND resumed_at IS NULL
       ORDER BY id DESC LIMIT 1) = 'awaiting_review'
  AND NOT EXISTS (SELECT 1 FROM reviews WHERE analysis_id = %s AND status = 'pending')
RETURNING status
"""
"""Queue again an analysis paused for review once none of its reviews is pending."""
