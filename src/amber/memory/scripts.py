"""Lua scripts of the L1 write path. Each runs atomically on one slot (one agent)."""

from __future__ import annotations


def _bump_sequence(seq_key: str, explicit: str, ttl: str) -> str:
    """Lua that sets the agent's sequence to ``explicit`` if given, else increments it."""
    return f"""
local seq
if {explicit} ~= '' then
  redis.call('SET', {seq_key}, {explicit})
  seq = tonumber({explicit})
else
  seq = redis.call('INCR', {seq_key})
end
redis.call('PEXPIRE', {seq_key}, {ttl})
"""


WRITE = (
    """
-- One L1 mutation plus its bookkeeping, atomically.
-- KEYS[1] the L1 key, KEYS[2] the agent's index hash, KEYS[3] the agent's sequence
-- ARGV[1] command (SET, RPUSH, HSET, ...), ARGV[2] key name, ARGV[3] expected type
-- ARGV[4] TTL in ms for key, index and sequence, ARGV[5] explicit sequence or ''
-- ARGV[6..] the command's arguments after the key
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= ARGV[3] then
  return redis.error_reply('WRONGTYPE ' .. t)
end
local result = redis.call(ARGV[1], KEYS[1], unpack(ARGV, 6))
local ttl = tonumber(ARGV[4])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('HDEL', KEYS[2], ARGV[2])
end
"""
    + _bump_sequence("KEYS[3]", "ARGV[5]", "ttl")
    + """
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {result, seq}
"""
)

DELETE = (
    """
-- Delete L1 keys and drop them from the index, atomically.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3..] the L1 keys
-- ARGV[1] TTL in ms for the sequence, ARGV[2] explicit sequence or '', ARGV[3..] key names
local n = 0
for i = 3, #KEYS do
  n = n + redis.call('DEL', KEYS[i])
  redis.call('HDEL', KEYS[1], ARGV[i])
end
"""
    + _bump_sequence("KEYS[2]", "ARGV[2]", "tonumber(ARGV[1])")
    + """
return {n, seq}
"""
)

READ = """
-- Read an agent's whole L1 at one instant.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3..] the L1 keys the caller found in the index
-- ARGV[1..] the names of KEYS[3..], in the same order
-- Returns {'retry'} if the index changed since the caller read it, else
-- {sequence, type1, value1, type2, value2, ...} with each value read by its actual type.
local idx = redis.call('HGETALL', KEYS[1])
if #idx / 2 ~= #ARGV then return {'retry'} end
local listed = {}
for i = 1, #idx, 2 do listed[idx[i]] = true end
for i = 1, #ARGV do
  if not listed[ARGV[i]] then return {'retry'} end
end
local out = {redis.call('GET', KEYS[2])}
for i = 3, #KEYS do
  local t = redis.call('TYPE', KEYS[i])['ok']
  local v = false
  if t == 'string' then v = redis.call('GET', KEYS[i])
  elseif t == 'list' then v = redis.call('LRANGE', KEYS[i], 0, -1)
  elseif t == 'hash' then v = redis.call('HGETALL', KEYS[i])
  elseif t == 'set' then v = redis.call('SMEMBERS', KEYS[i])
  elseif t == 'zset' then v = redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')
  end
  out[#out + 1] = t
  out[#out + 1] = v
end
return out
"""
