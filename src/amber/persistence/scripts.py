"""Lua scripts of the persistence module: each check-and-write runs atomically in Redis.

Every script is headed by the ``KEYS[]`` and ``ARGV[]`` it takes and what it
returns. Every key a script touches is one of its ``KEYS[]``, and all of them
share a slot (``amber.keys.Keys``: a session's keys carry ``{session_id}``), so
each script runs on Redis Cluster as on one server. Operations that span slots
(the session index, a task's lookup) are several scripts run in turn by
``amber.persistence.core``. Times come from the server's clock (``TIME``), so
scores and key TTLs agree.
"""

from __future__ import annotations

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""


# -- sessions --------------------------------------------------------------------------
def _index_session(index: str, session_id: str, ttl: str) -> str:
    """Lua (after ``_NOW_MS``) that drops expired entries of the session index and scores
    the session now + TTL, or one above its current score if that is higher."""
    return f"""
redis.call('ZREMRANGEBYSCORE', {index}, '-inf', now)
local score = now + tonumber({ttl})
local old = redis.call('ZSCORE', {index}, {session_id})
if old and tonumber(old) >= score then score = tonumber(old) + 1 end
redis.call('ZADD', {index}, score, {session_id})
"""


_SAVE_IF_VERSION = """
local expected = tonumber(ARGV[1])
local current = redis.call('GET', KEYS[1])
if current then
  local stored = tonumber(string.match(current, '^{"version":(%d+),'))
  if stored == nil then stored = cjson.decode(current)['version'] end
  if stored ~= expected then return {0, stored} end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, expected + 1}
"""

SAVE_SESSION = (
    """
-- KEYS[1] session key
-- ARGV[1] expected version v, ARGV[2] session JSON already carrying version v+1,
-- ARGV[3] TTL in ms
-- Returns {1, v+1} when written, {0, stored version} on a version conflict.
-- amber writes the version first ({"version":N,...}), read without decoding the JSON.
"""
    + _SAVE_IF_VERSION
)

INDEX_SESSION = (
    """
-- KEYS[1] session index (zset: session_id -> expiry, ms)
-- ARGV[1] session_id, ARGV[2] the session's TTL in ms
-- Drops entries that have expired, then scores the session now + TTL, or one above its
-- current score if that is higher: a score never falls below the expiry of the
-- session's document, and every save changes it. Returns the new score.
"""
    + _NOW_MS
    + _index_session("KEYS[1]", "ARGV[1]", "ARGV[2]")
    + """
return score
"""
)

SAVE_SESSION_INDEXED = (
    """
-- INDEX_SESSION then SAVE_SESSION in one step, where both keys are on one server.
-- KEYS[1] session key, KEYS[2] session index
-- ARGV[1] expected version v, ARGV[2] session JSON already carrying version v+1,
-- ARGV[3] TTL in ms, ARGV[4] session_id
-- Returns as SAVE_SESSION.
"""
    + _NOW_MS
    + _index_session("KEYS[2]", "ARGV[4]", "ARGV[3]")
    + _SAVE_IF_VERSION
)

SESSION_IDS = (
    """
-- KEYS[1] session index
-- Drops entries that have expired; returns the other ids, latest expiry first.
"""
    + _NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZREVRANGE', KEYS[1], 0, -1)
"""
)

UNINDEX_SESSION = """
-- KEYS[1] session index
-- ARGV[1] session_id, ARGV[2] its score, read before its document was deleted
-- Removes the entry only if its score is still ARGV[2]: a save since then has changed it,
-- and that session's entry stays. Returns 1 if removed, else 0.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""

# -- tasks: KEYS[1] session key, KEYS[2] its tasks (hash: task_id -> JSON), KEYS[3] their
# -- expiry (zset: task_id -> ms), KEYS[4] its task queue (list of task ids) ----------------
_DROP_EXPIRED_TASKS = (
    _NOW_MS
    + """
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, id in ipairs(expired) do redis.call('HDEL', KEYS[2], id) end
if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now) end
"""
)

SAVE_TASK = (
    """
-- KEYS[1] session key, KEYS[2] its tasks, KEYS[3] their expiry, KEYS[4] its task queue
-- ARGV[1] task JSON, ARGV[2] TTL in ms, ARGV[3] task_id
-- Stores the task until now + TTL and queues it, unless the session holds it already
-- (then it is updated in place, not queued again). The three task keys live as long as
-- the session's longest-lived task.
-- Returns 1 queued, 0 updated in place, -1 no such session.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
"""
    + _DROP_EXPIRED_TASKS
    + """
local known = redis.call('HEXISTS', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[3])
if known == 0 then redis.call('LPUSH', KEYS[4], ARGV[3]) end
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', KEYS[2], last)
redis.call('PEXPIREAT', KEYS[3], last)
redis.call('PEXPIREAT', KEYS[4], last)
return 1 - known
"""
)

GET_TASK = (
    """
-- KEYS[1] a session's tasks, KEYS[2] their expiry
-- ARGV[1] task_id
-- Returns the task's JSON, or nil if the session does not hold it or it has expired.
"""
    + _NOW_MS
    + """
local expires = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expires or tonumber(expires) <= now then return false end
return redis.call('HGET', KEYS[1], ARGV[1])
"""
)

NEXT_TASK = (
    """
-- KEYS[1] session key, KEYS[2] its tasks, KEYS[3] their expiry, KEYS[4] its task queue
-- Pops the oldest queued id whose task has not expired; ids of expired tasks are dropped.
-- Returns {1, task JSON}, {0} when the queue is empty, {-1} no such session.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
"""
    + _DROP_EXPIRED_TASKS
    + """
while true do
  local id = redis.call('RPOP', KEYS[4])
  if not id then return {0} end
  local body = redis.call('HGET', KEYS[2], id)
  if body then return {1, body} end
end
"""
)

LIST_TASKS = (
    """
-- KEYS[1] session key, KEYS[2] its tasks, KEYS[3] their expiry, KEYS[4] its task queue
-- Returns {1, task JSON...} oldest first, skipping tasks that have expired, or {-1} if
-- there is no such session.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
"""
    + _DROP_EXPIRED_TASKS
    + """
local out = {1}
local ids = redis.call('LRANGE', KEYS[4], 0, -1)
for i = #ids, 1, -1 do
  local body = redis.call('HGET', KEYS[2], ids[i])
  if body then out[#out + 1] = body end
end
return out
"""
)

DELETE_SESSION = (
    """
-- KEYS[1] session key, KEYS[2] its tasks, KEYS[3] their expiry, KEYS[4] its task queue
-- Deletes all four. Returns {-1} if none exists, else {the number of tasks deleted that
-- had not expired, then the id of every task the session held}.
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4]) == 0 then return {-1} end
"""
    + _NOW_MS
    + """
local out = {redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')}
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do out[#out + 1] = id end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return out
"""
)

CLAIM_TASK = """
-- KEYS[1] a task's lookup (the id of the session that holds it)
-- ARGV[1] session_id, ARGV[2] TTL in ms, ARGV[3] a session found not to hold the task
-- ('' for none)
-- Names ARGV[1] as the task's session for TTL ms, unless another session (other than
-- ARGV[3]) is named. Returns {1} named, {0, the session named}.
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] and owner ~= ARGV[3] then return {0, owner} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1}
"""

RELEASE_TASK = """
-- KEYS[1] a task's lookup
-- ARGV[1] session_id
-- Deletes the lookup if it names ARGV[1]. Returns 1 if deleted, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

SCRIPTS = {
    "save_session": SAVE_SESSION,
    "index_session": INDEX_SESSION,
    "save_session_indexed": SAVE_SESSION_INDEXED,
    "session_ids": SESSION_IDS,
    "unindex_session": UNINDEX_SESSION,
    "save_task": SAVE_TASK,
    "get_task": GET_TASK,
    "next_task": NEXT_TASK,
    "list_tasks": LIST_TASKS,
    "delete_session": DELETE_SESSION,
    "claim_task": CLAIM_TASK,
    "release_task": RELEASE_TASK,
}
"""Every script by the name an operation's ``Run`` gives; each shell registers them all."""
