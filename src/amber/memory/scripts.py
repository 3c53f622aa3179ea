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
-- One L1 mutation plus its bookkeeping, atomically. The index maps each key name to
-- '<type>:<sequence of its last write>:<server time of it>': unique per write even
-- when a restore makes the agent's sequence numbers run again.
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
"""
    + _bump_sequence("KEYS[3]", "ARGV[5]", "ttl")
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. ':' .. seq .. ':' .. now[1] .. now[2])
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('HDEL', KEYS[2], ARGV[2])
end
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
-- Read an agent's whole L1 at one instant, or what changed of it since a known state.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3..] L1 keys the caller found in the index
-- (all of them, or one chunk of them)
-- ARGV[1..n] the names of KEYS[3..], in the same order; ARGV[n+1..2n] the index entry
-- ('<type>:<seq>:<time>') of the value the caller already holds for each, or '';
-- ARGV[2n+1] how many keys the index had in all when the caller read it
-- Returns {'retry'} if keys were added or removed since the caller read the index,
-- else one msgpack blob of {sequence, entry1, type1, value1, ...}: each key's index
-- entry now, and its value read by its actual type, or the type 'same' (value false)
-- when the key still holds the value the caller has.
local n = #KEYS - 2
if redis.call('HLEN', KEYS[1]) ~= tonumber(ARGV[2 * n + 1]) then return {'retry'} end
local entries = {}
for i = 1, n do
  local e = redis.call('HGET', KEYS[1], ARGV[i])
  if not e then return {'retry'} end
  entries[i] = e
end
local function read(t, key)
  if t == 'string' then return redis.pcall('GET', key)
  elseif t == 'list' then return redis.pcall('LRANGE', key, 0, -1)
  elseif t == 'hash' then return redis.pcall('HGETALL', key)
  elseif t == 'set' then return redis.pcall('SMEMBERS', key)
  elseif t == 'zset' then return redis.pcall('ZRANGE', key, 0, -1, 'WITHSCORES')
  end
  return nil
end
local out = {redis.call('GET', KEYS[2])}
for i = 1, n do
  local key = KEYS[i + 2]
  local t = string.match(entries[i], '^[^:]*')
  local v
  if ARGV[n + i] == entries[i] and redis.call('EXISTS', key) == 1 then
    t, v = 'same', false
  else
    v = read(t, key)
    if v == nil or (type(v) == 'table' and v.err) then  -- not the indexed type
      t = redis.call('TYPE', key)['ok']
      v = read(t, key) or false
    elseif v == false or (type(v) == 'table' and #v == 0) then  -- expired
      t, v = 'none', false
    end
  end
  out[#out + 1] = entries[i]
  out[#out + 1] = t
  out[#out + 1] = v
end
return cmsgpack.pack(out)
"""

RESTORE = """
-- Replace an agent's whole L1 with a snapshot, atomically.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3 .. n+2] the L1 keys to write,
-- KEYS[n+3 ..] stale L1 keys to delete
-- ARGV[1] msgpack list of {type, values} aligned with KEYS[3 .. n+2]: values is a
--         string, or a flat list (list items; set members; hash field, value, ...;
--         zset score, member, ...); ARGV[2] n; ARGV[3] TTL in ms; ARGV[4] sequence;
-- ARGV[5 .. n+4] the key names, aligned with KEYS[3 .. n+2]
local data = cmsgpack.unpack(ARGV[1])
local n = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local writers = {list = 'RPUSH', set = 'SADD', hash = 'HSET', zset = 'ZADD'}
local now = redis.call('TIME')
local stamp = ':' .. ARGV[4] .. ':' .. now[1] .. now[2]
for i = n + 3, #KEYS do
  redis.call('DEL', KEYS[i])
end
redis.call('DEL', KEYS[1])
for i = 1, n do
  local key, item = KEYS[i + 2], data[i]
  redis.call('DEL', key)
  if item[1] == 'string' then
    redis.call('SET', key, item[2])
  else
    local values = item[2]
    for j = 1, #values, 1000 do
      redis.call(writers[item[1]], key, unpack(values, j, math.min(j + 999, #values)))
    end
  end
  redis.call('PEXPIRE', key, ttl)
  redis.call('HSET', KEYS[1], ARGV[i + 4], item[1] .. stamp)
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl)
return n
"""

EXPIRE = (
    """
-- Give one L1 key its own TTL, marking its index entry ':own' so that its expiry is
-- known to be intended (not the partial loss recovery must repair).
-- KEYS[1] the L1 key, KEYS[2] index, KEYS[3] sequence
-- ARGV[1] key name, ARGV[2] the key's TTL in ms, ARGV[3] TTL in ms for the sequence,
-- ARGV[4] explicit sequence or ''
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry or redis.call('PEXPIRE', KEYS[1], ARGV[2]) == 0 then
  return {0, false}
end
"""
    + _bump_sequence("KEYS[3]", "ARGV[4]", "tonumber(ARGV[3])")
    + """
local now = redis.call('TIME')
local t = string.match(entry, '^[^:]*')
redis.call('HSET', KEYS[2], ARGV[1], t .. ':' .. seq .. ':' .. now[1] .. now[2] .. ':own')
return {1, seq}
"""
)
