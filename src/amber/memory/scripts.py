"""Lua scripts of working memory. Each runs atomically on one slot (one agent).

Every script names every key it touches in ``KEYS[]`` (never built from ``ARGV``),
so it runs on Redis Cluster too.

The *epoch* key says which incarnation of an agent's memory Redis holds. A restore
starts a new one (``r<seq>:<nonce>``: born from the snapshot at ``seq``), and so
does a write into a memory that does not exist (``e<seq>:<time>``: born empty).
A guarded caller passes the epoch it holds; when Redis has another (or none) the
script refuses with ``AMBER_LOST``: the memory was lost (restart, flush, expiry)
or replaced since, and the caller must recover instead of reading a memory that
silently lost data. ``''`` means unguarded; ``'-'`` means "none yet".
"""

from __future__ import annotations

LOST = "AMBER_LOST"
"""Error reply prefix when the epoch is not the one the caller holds."""

MAX_ARGS_PER_CALL = 1000
"""Arguments a script passes to one Redis command; larger writes go in chunks (Lua's
``unpack`` fails past about 8,000), still inside one atomic script."""

_CHECK_EPOCH = """
local epoch = redis.call('GET', {epoch_key})
if {expected} ~= '' and (epoch or '-') ~= {expected} then
  return redis.error_reply('{lost} ' .. (epoch or '-'))
end
"""


def _check_epoch(epoch_key: str, expected: str) -> str:
    return _CHECK_EPOCH.format(epoch_key=epoch_key, expected=expected, lost=LOST)


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


def _keep_epoch(epoch_key: str, ttl: str) -> str:
    """Lua that starts an epoch (born empty) if there is none, and refreshes its TTL."""
    return f"""
if not epoch then
  local now = redis.call('TIME')
  epoch = 'e' .. seq .. ':' .. now[1] .. now[2]
  redis.call('SET', {epoch_key}, epoch)
end
redis.call('PEXPIRE', {epoch_key}, {ttl})
"""


WRITE = (
    """
-- One L1 mutation plus its bookkeeping, atomically. The index maps each key name to
-- '<type>:<sequence of its last write>:<server time of it>': unique per write even
-- when a restore makes the agent's sequence numbers run again.
-- KEYS[1] the L1 key, KEYS[2] the agent's index hash, KEYS[3] the agent's sequence,
-- KEYS[4] the agent's epoch
-- ARGV[1] command (SET, RPUSH, HSET, ...), ARGV[2] key name, ARGV[3] expected type
-- ARGV[4] TTL in ms for key, index and sequence, ARGV[5] explicit sequence or '',
-- ARGV[6] expected epoch ('' unguarded, '-' none yet), ARGV[7..] the command's arguments
-- Returns {result, sequence, epoch}.
"""
    + _check_epoch("KEYS[4]", "ARGV[6]")
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
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
"""
    + _keep_epoch("KEYS[4]", "ttl")
    + """
return {result, seq, epoch}
"""
)

DELETE = (
    """
-- Delete L1 keys and drop them from the index, atomically.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4..] the L1 keys
-- ARGV[1] TTL in ms for the sequence, ARGV[2] explicit sequence or '',
-- ARGV[3] expected epoch, ARGV[4..] key names
"""
    + _check_epoch("KEYS[3]", "ARGV[3]")
    + """
local n = 0
for i = 4, #KEYS do
  n = n + redis.call('DEL', KEYS[i])
  redis.call('HDEL', KEYS[1], ARGV[i])
end
"""
    + _bump_sequence("KEYS[2]", "ARGV[2]", "tonumber(ARGV[1])")
    + _keep_epoch("KEYS[3]", "tonumber(ARGV[1])")
    + """
return {n, seq, epoch}
"""
)

EXPIRE = (
    """
-- Give one L1 key its own TTL, marking its index entry ':own' so that its expiry is
-- known to be intended (not the partial loss recovery must repair).
-- KEYS[1] the L1 key, KEYS[2] index, KEYS[3] sequence, KEYS[4] epoch
-- ARGV[1] key name, ARGV[2] the key's TTL in ms, ARGV[3] TTL in ms for the sequence,
-- ARGV[4] explicit sequence or '', ARGV[5] expected epoch
"""
    + _check_epoch("KEYS[4]", "ARGV[5]")
    + """
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry or redis.call('PEXPIRE', KEYS[1], ARGV[2]) == 0 then
  return {0, false, epoch or false}
end
"""
    + _bump_sequence("KEYS[3]", "ARGV[4]", "tonumber(ARGV[3])")
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
-- A guarded read of one L1 key: refused when the memory is not the caller's epoch.
-- KEYS[1] epoch, KEYS[2] the L1 key; ARGV[1] expected epoch, ARGV[2] command,
-- ARGV[3..] its arguments after the key
"""
    + _check_epoch("KEYS[1]", "ARGV[1]")
    + """
local r = redis.call(ARGV[2], KEYS[2], unpack(ARGV, 3))
if type(r) == 'table' and r['ok'] then return r['ok'] end
return r
"""
)

READ = """
-- Read an agent's whole L1 at one instant, or what changed of it since a known state.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4..] L1 keys the caller found
-- in the index (all of them, or one chunk of them)
-- ARGV[1..n] the names of KEYS[4..], in the same order; ARGV[n+1..2n] the index entry
-- ('<type>:<seq>:<time>') of the value the caller already holds for each, or '';
-- ARGV[2n+1..3n] the tag of the value the caller holds, or ''; ARGV[3n+1] how many
-- keys the index had in all when the caller read it
-- Returns {'retry'} if keys were added or removed since the caller read the index,
-- else one msgpack blob of {sequence, epoch, entry1, type1, value1, tag1, ttl1, ...}:
-- each key's index entry now, its value read by its actual type (or the type 'same'
-- and value false when it still holds the caller's value), its tag, and its own TTL
-- in ms (own TTLs only, else -1).
-- A tag is the tail of DUMP (RDB version and CRC64): a value changed by a client that
-- bypassed amber's write path changes its tag though not its index entry, so it is
-- read again instead of carried over.
local n = #KEYS - 3
if redis.call('HLEN', KEYS[1]) ~= tonumber(ARGV[3 * n + 1]) then return {'retry'} end
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
local function tag(key)
  local d = redis.call('DUMP', key)
  if not d then return false end
  return string.sub(d, -10)
end
local out = {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3])}
for i = 1, n do
  local key = KEYS[i + 3]
  local t = string.match(entries[i], '^[^:]*')
  local v, g = nil, tag(key)
  if ARGV[n + i] == entries[i] and ARGV[2 * n + i] ~= '' and g == ARGV[2 * n + i] then
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
  local ttl = -1
  if string.sub(entries[i], -4) == ':own' then ttl = redis.call('PTTL', key) end
  out[#out + 1] = entries[i]
  out[#out + 1] = t
  out[#out + 1] = v
  out[#out + 1] = g
  out[#out + 1] = ttl
end
return cmsgpack.pack(out)
"""

RESTORE = f"""
-- Replace an agent's whole L1 with a snapshot, atomically, as a new epoch.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4 .. n+3] the L1 keys to write,
-- KEYS[n+4 ..] stale L1 keys to delete
-- ARGV[1] msgpack list of {{type, values, own_ttl_ms}} aligned with KEYS[4 .. n+3]: values
--         is a string, or a flat list (list items; set members; hash field, value, ...;
--         zset score, member, ...); own_ttl_ms > 0 restores a key's own TTL
-- ARGV[2] n; ARGV[3] TTL in ms; ARGV[4] sequence; ARGV[5] the new epoch;
-- ARGV[6 .. n+5] the key names, aligned with KEYS[4 .. n+3]
local data = cmsgpack.unpack(ARGV[1])
local n = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local writers = {{list = 'RPUSH', set = 'SADD', hash = 'HSET', zset = 'ZADD'}}
local now = redis.call('TIME')
local stamp = ':' .. ARGV[4] .. ':' .. now[1] .. now[2]
for i = n + 4, #KEYS do
  redis.call('DEL', KEYS[i])
end
redis.call('DEL', KEYS[1])
for i = 1, n do
  local key, item = KEYS[i + 3], data[i]
  redis.call('DEL', key)
  if item[1] == 'string' then
    redis.call('SET', key, item[2])
  else
    local values = item[2]
    for j = 1, #values, {MAX_ARGS_PER_CALL} do
      local k = math.min(j + {MAX_ARGS_PER_CALL - 1}, #values)
      redis.call(writers[item[1]], key, unpack(values, j, k))
    end
  end
  local own = tonumber(item[3]) or 0
  if own > 0 then
    redis.call('PEXPIRE', key, own)
    redis.call('HSET', KEYS[1], ARGV[i + 5], item[1] .. stamp .. ':own')
  else
    redis.call('PEXPIRE', key, ttl)
    redis.call('HSET', KEYS[1], ARGV[i + 5], item[1] .. stamp)
  end
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl)
redis.call('SET', KEYS[3], ARGV[5], 'PX', ttl)
return n
"""

WRITE_SEALED = """
-- Store sealed values (codec.seal), each only if the key holds no sealed value with a
-- higher sequence: a slow or stale writer never replaces a newer copy.
-- KEYS[i] the keys; ARGV[3i-2] value, ARGV[3i-1] its sequence as 20 digits,
-- ARGV[3i] TTL in ms. Returns how many were written.
local written = 0
for i, key in ipairs(KEYS) do
  local ok, old = pcall(redis.call, 'GET', key)
  local seq = ARGV[3 * i - 1]
  if ok and old and string.sub(old, 1, 4) == 'AMB1' and string.sub(old, 5, 24) > seq then
    -- a newer copy is there: keep it
  else
    if not ok then redis.call('DEL', key) end  -- a key of another type: not ours to keep
    redis.call('SET', key, ARGV[3 * i - 2], 'PX', ARGV[3 * i])
    written = written + 1
  end
end
return written
"""
