"""Lua scripts of working-memory writes: one mutation, a delete, an expiry, a batch, and
a guarded read of one key. Each checks the caller's epoch and fencing token first (see
``memory/scripts.py``, where the fragments they share live)."""

from __future__ import annotations

from amber.engines.retry import register_idempotent
from amber.memory.scripts import (
    LOST,
    MAX_ARGS_PER_CALL,
    _bump_sequence,
    _check_epoch,
    _keep_epoch,
    _mark_changed,
)

WRITE = (
    """
-- One L1 mutation plus its bookkeeping, atomically. The index maps each key name to
-- '<type>:<sequence of its last write>:<server time of it>': unique per write even
-- when a restore makes the agent's sequence numbers run again.
-- KEYS[1] the L1 key, KEYS[2] the agent's index hash, KEYS[3] the agent's sequence,
-- KEYS[4] the agent's epoch, KEYS[5] the agent's changes (zset: name -> sequence of its
-- last write or delete, so a snapshot reads only what changed)
-- ARGV[1] command (SET, RPUSH, HSET, ...), ARGV[2] key name, ARGV[3] expected type
-- ARGV[4] TTL in ms for key, index and sequence, ARGV[5] explicit sequence or '',
-- KEYS[6] the agent's fence
-- ARGV[6] expected epoch ('' unguarded, '-' none yet) and the run's token, ARGV[7..] the
-- command's arguments
-- Returns {result, sequence, epoch}.
"""
    + _check_epoch("KEYS[4]", "ARGV[6]", "KEYS[6]")
    + f"""
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= ARGV[3] then
  return redis.error_reply('WRONGTYPE ' .. t)
end
local cmd, result = ARGV[1], 0
if cmd == 'SET' then
  result = redis.call('SET', KEYS[1], ARGV[7])
else
  for i = 7, #ARGV, {MAX_ARGS_PER_CALL} do
    local j = math.min(i + {MAX_ARGS_PER_CALL - 1}, #ARGV)
    local r = redis.call(cmd, KEYS[1], unpack(ARGV, i, j))
    if cmd == 'RPUSH' or cmd == 'LPUSH' then result = r else result = result + r end
  end
end
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
redis.call('PEXPIRE', KEYS[2], ttl)  -- an index emptied by the write: 0, no error
"""
    + _mark_changed("KEYS[5]", "ARGV[2]", "ttl")
    + _keep_epoch("KEYS[4]", "ttl")
    + """
return {result, seq, epoch}
"""
)

DELETE = (
    """
-- Delete L1 keys and drop them from the index, atomically.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4] changes, KEYS[5..] the L1 keys,
-- then the agent's fence (last)
-- ARGV[1] TTL in ms for the sequence, ARGV[2] explicit sequence or '',
-- ARGV[3] expected epoch and token, ARGV[5..] key names (ARGV[4] unused, to align with KEYS)
"""
    + _check_epoch("KEYS[3]", "ARGV[3]", "KEYS[#KEYS]")
    + """
local n = 0
for i = 5, #KEYS - 1 do
  n = n + redis.call('DEL', KEYS[i])
  redis.call('HDEL', KEYS[1], ARGV[i])
end
"""
    + _bump_sequence("KEYS[2]", "ARGV[2]", "tonumber(ARGV[1])")
    + """
for i = 5, #ARGV do
  redis.call('ZADD', KEYS[4], seq, ARGV[i])
end
redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[1]))
"""
    + _keep_epoch("KEYS[3]", "tonumber(ARGV[1])")
    + """
return {n, seq, epoch}
"""
)

EXPIRE = (
    """
-- Give one L1 key its own TTL, marking its index entry ':own' so that its expiry is
-- known to be intended (not the partial loss recovery must repair).
-- KEYS[1] the L1 key, KEYS[2] index, KEYS[3] sequence, KEYS[4] epoch, KEYS[5] changes,
-- KEYS[6] fence
-- ARGV[1] key name, ARGV[2] the key's TTL in ms, ARGV[3] TTL in ms for the sequence,
-- ARGV[4] explicit sequence or '', ARGV[5] expected epoch and token
"""
    + _check_epoch("KEYS[4]", "ARGV[5]", "KEYS[6]")
    + """
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry or redis.call('PEXPIRE', KEYS[1], ARGV[2]) == 0 then
  return {0, false, epoch or false}
end
"""
    + _bump_sequence("KEYS[3]", "ARGV[4]", "tonumber(ARGV[3])")
    + _mark_changed("KEYS[5]", "ARGV[1]", "tonumber(ARGV[3])")
    + _keep_epoch("KEYS[4]", "tonumber(ARGV[3])")
    + """
local now = redis.call('TIME')
local t = string.match(entry, '^[^:]*')
redis.call('HSET', KEYS[2], ARGV[1], t .. ':' .. seq .. ':' .. now[1] .. now[2] .. ':own')
return {1, seq, epoch}
"""
)

READ_ONE = (
    """
-- A guarded read of one L1 key: refused when the memory is not the caller's epoch, or
-- when the key is gone though the index lists it (part of the memory was lost: an
-- eviction, an expiry), so a lost value is never read as a missing one.
-- KEYS[1] epoch, KEYS[2] the L1 key, KEYS[3] index; ARGV[1] expected epoch, ARGV[2]
-- command, ARGV[3] key name, ARGV[4..] the command's arguments after the key
"""
    + _check_epoch("KEYS[1]", "ARGV[1]")
    + """
if redis.call('EXISTS', KEYS[2]) == 0 then
  local e = redis.call('HGET', KEYS[3], ARGV[3])
  if e and string.sub(e, -4) ~= ':own' then
    return redis.error_reply('"""
    + LOST
    + """ ' .. (epoch or '-') .. ' ' .. ARGV[3])
  end
end
local r = redis.call(ARGV[2], KEYS[2], unpack(ARGV, 4))
if type(r) == 'table' and r['ok'] then return r['ok'] end
return r
"""
)

BATCH = (
    """
-- Many L1 writes in one atomic step with their bookkeeping: one sequence for the batch.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4] changes, KEYS[5..] the L1 key
-- of each write, aligned with the writes
-- ARGV[1] msgpack list of writes {command, key name, type, {arguments}} (DEL: type '')
-- of each write, aligned with the writes, then the agent's fence (last)
-- ARGV[2] TTL in ms, ARGV[3] explicit sequence or '', ARGV[4] expected epoch and token
-- Every write's type is checked before any is applied, so a batch applies whole or
-- not at all. Returns {results, sequence, epoch}.
"""
    + _check_epoch("KEYS[3]", "ARGV[4]", "KEYS[#KEYS]")
    + """
local ops = cmsgpack.unpack(ARGV[1])
local types = {}
for i, op in ipairs(ops) do
  local key = KEYS[i + 4]
  local t = types[key]
  if t == nil then t = redis.call('TYPE', key)['ok'] end
  if op[1] == 'DEL' then
    t = 'none'
  elseif t ~= 'none' and t ~= op[3] then
    return redis.error_reply('WRONGTYPE ' .. t .. ' ' .. op[2])
  else
    t = op[3]
  end
  types[key] = t
end
local ttl = tonumber(ARGV[2])
"""
    + _bump_sequence("KEYS[2]", "ARGV[3]", "ttl")
    + f"""
local now = redis.call('TIME')
local stamp = ':' .. seq .. ':' .. now[1] .. now[2]
local results, entries, order, marks = {{}}, {{}}, {{}}, {{}}
for i, op in ipairs(ops) do
  local key, cmd, name, args = KEYS[i + 4], op[1], op[2], op[4]
  local r = 0
  if entries[name] == nil then order[#order + 1] = name end
  if cmd == 'DEL' then
    r = redis.call('DEL', key)
    entries[name] = false
  elseif cmd == 'SET' then
    redis.call('SET', key, args[1], 'PX', ttl)  -- a string always exists once set
    entries[name] = 'string' .. stamp
    r = 1
  else
    for j = 1, #args, {MAX_ARGS_PER_CALL} do
      local k = math.min(j + {MAX_ARGS_PER_CALL - 1}, #args)
      local x = redis.call(cmd, key, unpack(args, j, k))
      if cmd == 'RPUSH' or cmd == 'LPUSH' then r = x else r = r + x end
    end
    if redis.call('EXISTS', key) == 1 then
      entries[name] = op[3] .. stamp
      redis.call('PEXPIRE', key, ttl)
    else
      entries[name] = false
    end
  end
  results[i] = r
end
-- the index and the change marks once for the batch, each name as its last write left it
local set, gone = {{}}, {{}}
for _, name in ipairs(order) do
  local entry = entries[name]
  if entry then
    set[#set + 1] = name
    set[#set + 1] = entry
  else
    gone[#gone + 1] = name
  end
  marks[#marks + 1] = seq
  marks[#marks + 1] = name
end
local function chunked(cmd, key, list, step)  -- step arguments a call, under unpack's limit
  for i = 1, #list, step do
    redis.call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
  end
end
chunked('HSET', KEYS[1], set, {2 * MAX_ARGS_PER_CALL})
chunked('HDEL', KEYS[1], gone, {MAX_ARGS_PER_CALL})
chunked('ZADD', KEYS[4], marks, {2 * MAX_ARGS_PER_CALL})
redis.call('PEXPIRE', KEYS[1], ttl)  -- an index emptied by the batch: 0, no error
redis.call('PEXPIRE', KEYS[4], ttl)
"""
    + _keep_epoch("KEYS[3]", "ttl")
    + """
return {results, seq, epoch}
"""
)


register_idempotent(READ_ONE)
