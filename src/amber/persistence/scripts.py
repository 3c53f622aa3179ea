"""Lua scripts of the persistence module: each check-and-write runs atomically in Redis.

Every script is headed by the ``KEYS[]`` and ``ARGV[]`` it takes and what it
returns. Times come from the server's clock (``TIME``), so index scores and key
TTLs agree. Scripts that reach documents by id build their keys from a key base
passed in ``ARGV`` (made by ``amber.keys.Keys``): they run on one Redis server
(standalone or behind Sentinel), not across Redis Cluster slots.
"""

from __future__ import annotations

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

SAVE_SESSION = (
    """
-- KEYS[1] session key, KEYS[2] session index (zset: session_id -> expiry, ms)
-- ARGV[1] expected version v, ARGV[2] session JSON already carrying version v+1,
-- ARGV[3] TTL in ms, ARGV[4] session_id
-- Returns {1, v+1} when written, {0, stored version} on a version conflict.
-- amber writes the version first ({"version":N,...}), read without decoding the JSON.
local expected = tonumber(ARGV[1])
local current = redis.call('GET', KEYS[1])
if current then
  local stored = tonumber(string.match(current, '^{"version":(%d+),'))
  if stored == nil then stored = cjson.decode(current)['version'] end
  if stored ~= expected then return {0, stored} end
end
"""
    + _NOW_MS
    + """
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[4])
return {1, expected + 1}
"""
)

SAVE_TASK = """
-- KEYS[1] session key, KEYS[2] task key, KEYS[3] the session's task queue (list),
-- KEYS[4] the session's task set
-- ARGV[1] task JSON, ARGV[2] TTL in ms, ARGV[3] task_id, ARGV[4] session_id
-- Returns {1} queued, {0} an existing task of this session updated in place (not queued
-- again), {-1} no such session, {-2, owner} the task id belongs to another session.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local old = redis.call('GET', KEYS[2])
if old then
  local owner = cjson.decode(old)['session_id']
  if owner ~= ARGV[4] then return {-2, tostring(owner)} end
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  return {0}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('LPUSH', KEYS[3], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
return {1}
"""

NEXT_TASK = """
-- KEYS[1] session key, KEYS[2] the session's task queue (list), KEYS[3] its task set
-- ARGV[1] task key base ("<prefix>:task:")
-- Pops the oldest queued id whose task still exists; ids of expired tasks are dropped.
-- Returns {1, task JSON}, {0} when the queue is empty, {-1} no such session.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
while true do
  local id = redis.call('RPOP', KEYS[2])
  if not id then return {0} end
  local body = redis.call('GET', ARGV[1] .. id)
  if body then return {1, body} end
  redis.call('SREM', KEYS[3], id)
end
"""

DELETE_SESSION = """
-- KEYS[1] session key, KEYS[2] its task queue, KEYS[3] its task set, KEYS[4] session index
-- ARGV[1] task key base ("<prefix>:task:"), ARGV[2] session_id
-- Returns the number of task documents deleted, or -1 if nothing of the session exists.
if redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3]) == 0 then return -1 end
local deleted = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  deleted = deleted + redis.call('DEL', ARGV[1] .. id)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[2])
return deleted
"""

SAVE_REVIEW = (
    """
-- KEYS[1] review key, KEYS[2] review queue (zset: review_id -> expires_at, ms)
-- ARGV[1] review JSON, ARGV[2] expires_at in Unix ms, ARGV[3] review_id
-- Drops queue entries that have expired, stores the review until expires_at, queues it.
-- Returns 1.
"""
    + _NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
return 1
"""
)

LIST_INDEXED = (
    """
-- KEYS[1] an index (zset: id -> expiry, ms)
-- ARGV[1] document key base ("<prefix>:session:" or "<prefix>:review:"),
-- ARGV[2] most documents to return (0: all), ARGV[3] "1" for latest expiry first
-- Drops index entries that have expired or whose document is gone, then returns the
-- documents in index order.
"""
    + _NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local ids
if ARGV[3] == '1' then
  ids = redis.call('ZREVRANGE', KEYS[1], 0, -1)
else
  ids = redis.call('ZRANGE', KEYS[1], 0, -1)
end
local limit = tonumber(ARGV[2])
local out = {}
for _, id in ipairs(ids) do
  local body = redis.call('GET', ARGV[1] .. id)
  if body then
    out[#out + 1] = body
    if limit > 0 and #out >= limit then break end
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
"""
)
