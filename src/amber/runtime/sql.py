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


def _resume_after(reason: str, blocker: str) -> str:
    """The statement that queues again an analysis paused for ``reason`` once nothing
    ``blocker`` selects (of ``%(aid)s``) holds it any more."""
    return f"""
UPDATE analyses SET status = 'running', updated_at = NOW()
WHERE analysis_id = %(aid)s AND status = 'paused'
  AND (SELECT reason FROM analysis_pauses WHERE analysis_id = %(aid)s AND resumed_at IS NULL
       ORDER BY id DESC LIMIT 1) = '{reason}'
  AND NOT EXISTS ({blocker})
RETURNING status
"""


RESUME_AFTER_STEP = _resume_after(
    "step_in_doubt",
    "SELECT 1 FROM step_intents WHERE analysis_id = %(aid)s AND status = 'started'",
)
"""Queue again an analysis paused for a step in doubt once none of its steps is."""

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
# A review is an analysis's (scope '', opened by a waiting step, decided or expired as the
# step declared) or a task's (scope: the sessions module's key prefix; saved by that module,
# gone once its deadline, the module's expires_at, has passed).
_REVIEW_COLUMNS = (
    "review_id, analysis_id, agent_id, agent_type, step_key, kind, payload, deadline,"
    " on_deadline, status, decision, decided_by, decided_at, created_at, scope, task_id,"
    " confidence"
)

LIVE = "(scope = '' OR deadline > NOW())"
"""A review still there: every analysis's review, a task's until its deadline."""

OPEN_REVIEW = f"""
WITH fresh AS (
    INSERT INTO reviews (review_id, analysis_id, agent_id, agent_type, step_key, kind, payload,
                         deadline, on_deadline)
    SELECT %(review_id)s::varchar, %(analysis_id)s::uuid, %(agent_id)s::varchar,
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

PUT_TASK_REVIEW = f"""
INSERT INTO reviews (scope, review_id, task_id, confidence, deadline, kind, payload, status,
                     decision, decided_by, decided_at)
VALUES (%(scope)s, %(review_id)s, %(task_id)s, %(confidence)s, %(deadline)s, %(kind)s,
        %(payload)s, %(status)s, %(decision)s, %(decided_by)s, %(decided_at)s)
ON CONFLICT (scope, review_id) DO UPDATE SET
    task_id = EXCLUDED.task_id, confidence = EXCLUDED.confidence,
    deadline = EXCLUDED.deadline, kind = EXCLUDED.kind, payload = EXCLUDED.payload,
    status = EXCLUDED.status, decision = EXCLUDED.decision,
    decided_by = EXCLUDED.decided_by, decided_at = EXCLUDED.decided_at, created_at = NOW()
RETURNING {_REVIEW_COLUMNS}
"""
"""Store a task's review as given (a second save replaces the first)."""

PURGE_TASK_REVIEWS = """
DELETE FROM reviews WHERE scope <> '' AND deadline <= NOW() - INTERVAL '1 minute'
"""
"""Drop the tasks' reviews whose deadline has passed (reads stop seeing them at once)."""

REMOVE_TASK_REVIEW = f"""
DELETE FROM reviews WHERE scope = %s AND scope <> '' AND review_id = %s AND {LIVE}
RETURNING review_id
"""

DECIDE = f"""
UPDATE reviews SET status = %(status)s, decision = %(decision)s, decided_by = %(by)s,
    decided_at = NOW()
WHERE scope = %(scope)s AND review_id = %(review_id)s AND status = 'pending' AND {LIVE}
RETURNING {_REVIEW_COLUMNS}
"""
"""Decide a pending review, once: a decided review is never changed."""

REVIEW = f"SELECT {_REVIEW_COLUMNS} FROM reviews WHERE scope = %s AND review_id = %s AND {LIVE}"

SCOPES_OF = f"""
SELECT scope FROM reviews WHERE review_id = %s AND {LIVE} ORDER BY scope LIMIT 5
"""
"""The scopes holding a review with this id (one, but a task's id is its caller's)."""

REVIEWS = f"""
SELECT {_REVIEW_COLUMNS} FROM reviews
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(aid)s::uuid IS NULL OR analysis_id = %(aid)s::uuid)
  AND (%(scope)s::text IS NULL OR scope = %(scope)s) AND {LIVE}
ORDER BY CASE WHEN %(scope)s::text IS NULL THEN created_at END, deadline, created_at
LIMIT %(limit)s
"""
"""Reviews, oldest first; in one task scope, soonest deadline first."""

COUNT_REVIEWS = f"SELECT count(*) FROM reviews WHERE status = %s AND {LIVE}"

REVIEW_IDS_LIKE = f"""
SELECT CASE WHEN scope = '' THEN review_id ELSE scope || ':' || review_id END FROM reviews
WHERE (review_id LIKE %s ESCAPE '\\' OR scope || ':' || review_id LIKE %s ESCAPE '\\')
  AND {LIVE}
ORDER BY 1 LIMIT %s
"""
"""References of the reviews whose id (or ``scope:id``) starts with a prefix, a few."""

DUE_REVIEWS = """
SELECT review_id FROM reviews
WHERE scope = '' AND status = 'pending' AND deadline <= NOW()
ORDER BY deadline LIMIT %s
"""

LOCK_REVIEWED_ANALYSIS = """
SELECT 1 FROM analyses WHERE analysis_id =
    (SELECT analysis_id FROM reviews WHERE scope = %s AND review_id = %s)
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

RESUME_AFTER_REVIEW = _resume_after(
    "awaiting_review",
    "SELECT 1 FROM reviews WHERE analysis_id = %(aid)s AND status = 'pending'",
)
"""Queue again an analysis paused for review once none of its reviews is pending."""


# -- workers -------------------------------------------------------------------------------
WORKER_SEEN = """
INSERT INTO amber_workers (name, app, agent_types, lock_key) VALUES (%s, %s, %s, %s)
ON CONFLICT (name) DO UPDATE SET app = EXCLUDED.app, agent_types = EXCLUDED.agent_types,
    lock_key = EXCLUDED.lock_key, seen_at = NOW()
"""
"""A worker says it is alive, which agent names its app registers, and the liveness lock
its process holds (a worker whose process died stops counting at once)."""

WORKER_GONE = "DELETE FROM amber_workers WHERE name = %s"

_LIVE_WORKER = """w.seen_at > NOW() - make_interval(secs => %(live)s)
    AND w.lock_key IN (SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory'
                       AND granted AND classid = %(space)s::oid AND objsubid = 2)"""

UNSERVED = f"""
SELECT DISTINCT e->>'agent_type' FROM analyses a, jsonb_array_elements(a.agents) e
WHERE (%(aid)s::uuid IS NULL OR a.analysis_id = %(aid)s::uuid)
  AND a.status = 'running' AND {NO_LIVE_LEASE}
  AND EXISTS (SELECT 1 FROM amber_workers w WHERE {_LIVE_WORKER})
  AND NOT EXISTS (SELECT 1 FROM amber_workers w
                  WHERE {_LIVE_WORKER} AND e->>'agent_type' = ANY(w.agent_types))
ORDER BY 1 LIMIT %(limit)s
"""
"""Agent names that queued analyses (``%(aid)s``'s, or any's when NULL) need and no live
worker registers (none when no worker is alive at all: then they simply wait for one)."""

UNRUNNABLE = f"""
SELECT a.analysis_id::text, array_agg(e->>'agent_type' ORDER BY e->>'agent_type')
FROM analyses a, jsonb_array_elements(a.agents) e
WHERE a.status = 'running' AND {NO_LIVE_LEASE} AND NOT (e->>'agent_type' = ANY(%(known)s))
GROUP BY a.analysis_id ORDER BY a.analysis_id LIMIT %(limit)s
"""
"""Queued analyses a worker registering ``known`` cannot run, with the names it lacks."""
