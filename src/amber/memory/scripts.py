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

The *fence* key holds the fencing token of the newest run that took the agent over
(tokens grow with every claim of an analysis, ``schema/migrations.py``). A run's write
carries its token after the expected epoch (``<epoch>\n<token>``); a write, delete,
expiry or restore whose token is below the fence is refused with ``AMBER_FENCED``,
in the script that would make it: a run that lost its lease changes nothing.
"""

from __future__ import annotations

from amber.engines.retry import register_idempotent

LOST = "AMBER_LOST"
"""Error reply prefix when the epoch is not the one the caller holds."""

FENCED = "AMBER_FENCED"
"""Error reply prefix when a later run fenced the agent's memory off from the caller."""

FENCE_TTL_MS = 30 * 24 * 3600 * 1000
"""How long a fence outlives the last run that set it (longer than any paused TTL)."""

MAX_ARGS_PER_CALL = 1000
"""Arguments a script passes to one Redis command; larger writes go in chunks (Lua's
``unpack`` fails past about 8,000), still inside one atomic script."""

_CHECK_FENCE = """
if {token} ~= '' then
  local fence = redis.call('GET', {fence_key})
  if fence and tonumber(fence) > tonumber({token}) then
    return redis.error_reply('{fenced} ' .. fence)
  end
end
"""

_CHECK_EPOCH = """
local expected, token = string.match({arg}, '^([^\\n]*)\\n?(.*)$')
"""


def _check_fence(fence_key: str, token: str) -> str:
    """Lua refusing the script when ``fence_key`` holds a token above ``token``."""
    return _CHECK_FENCE.format(fence_key=fence_key, token=token, fenced=FENCED)


def _check_epoch(epoch_key: str, arg: str, fence_key: str | None = None) -> str:
    """Lua parsing ``arg`` (``<expected epoch>[\n<token>]``), refusing a fenced-off
    token (writes: ``fence_key``), then an epoch other than the expected one; leaves
    ``epoch`` set."""
    return (
        _CHECK_EPOCH.format(arg=arg)
        + (_check_fence(fence_key, "token") if fence_key else "")
        + f"""
local epoch = redis.call('GET', {epoch_key})
if expected ~= '' and (epoch or '-') ~= expected then
  return redis.error_reply('{LOST} ' .. (epoch or '-'))
end
"""
    )


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


def _mark_changed(changes_key: str, name: str, ttl: str) -> str:
    """Lua that records key ``name`` as changed at ``seq`` in the agent's changes zset."""
    return f"""
redis.call('ZADD', {changes_key}, seq, {name})
redis.call('PEXPIRE', {changes_key}, {ttl})
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


_READ_KEYS = f"""
local function read(t, key)
  if t == 'string' then return redis.pcall('GET', key)
  elseif t == 'list' then return redis.pcall('LRANGE', key, 0, -1)
  elseif t == 'hash' then return redis.pcall('HGETALL', key)
  elseif t == 'set' then return redis.pcall('SMEMBERS', key)
  elseif t == 'zset' then return redis.pcall('ZRANGE', key, 0, -1, 'WITHSCORES')
  end
  return nil
end
-- appends entry, type, value, own TTL of each of n keys starting at KEYS[first]; the
-- index entries and string values come a thousand at a time (HMGET, MGET: MGET answers
-- nil for a key of another type, which is then read by its type)
local function read_keys(out, first, n, whole)
  local entries, strings = {{}}, {{}}
  for j = 1, n, {MAX_ARGS_PER_CALL} do
    local k = math.min(j + {MAX_ARGS_PER_CALL - 1}, n)
    local es = redis.call('HMGET', KEYS[1], unpack(ARGV, j, k))
    local vs = redis.call('MGET', unpack(KEYS, first + j - 1, first + k - 1))
    for i = 1, k - j + 1 do
      entries[j + i - 1], strings[j + i - 1] = es[i], vs[i]
    end
  end
  for i = 1, n do
    local key = KEYS[first + i - 1]
    local e = entries[i]
    local t, v, ttl = 'gone', false, -1
    if not e and whole then return false end
    if e then
      t = string.match(e, '^[^:]*')
      if t == 'string' and strings[i] then
        v = strings[i]
      else
        v = read(t, key)
        if v == nil or (type(v) == 'table' and v.err) then  -- not the indexed type
          t = redis.call('TYPE', key)['ok']
          v = read(t, key) or false
        elseif v == false or (type(v) == 'table' and #v == 0) then  -- expired
          t, v = 'none', false
        end
      end
      if string.sub(e, -4) == ':own' then ttl = redis.call('PTTL', key) end
    end
    out[#out + 1] = e or false
    out[#out + 1] = t
    out[#out + 1] = v
    out[#out + 1] = ttl
  end
  return true
end
"""

READ = (
    """
-- Read keys of an agent's L1 at one instant: all of them, a chunk of them, or those
-- that changed since a snapshot.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4..] the L1 keys to read
-- ARGV[1..n] their names; ARGV[n+1] how many keys the index had when the caller read
-- it ('' when the names did not come from the index); ARGV[n+2] the sequence the caller
-- expects ('' for any)
-- Returns {'retry'} if keys were added or removed since the caller read the index, or
-- the sequence moved; else one msgpack blob of {sequence, epoch, entry1, type1, value1,
-- ttl1, ...}: each key's index entry (false when the index no longer names it), its
-- value read by its actual type (type 'none' when it expired), and its own TTL in ms
-- (own TTLs only, else -1).
"""
    + _READ_KEYS
    + """
local n = #KEYS - 3
local whole = ARGV[n + 1] ~= ''
if whole and redis.call('HLEN', KEYS[1]) ~= tonumber(ARGV[n + 1]) then return {'retry'} end
local seq = redis.call('GET', KEYS[2])
if ARGV[n + 2] ~= '' and (seq or '0') ~= ARGV[n + 2] then return {'retry'} end
local out = {seq, redis.call('GET', KEYS[3])}
if not read_keys(out, 4, n, whole) then return {'retry'} end
return cmsgpack.pack(out)
"""
)

REPAIR_INDEX = """
-- Bring an agent's index in line with what a read found, where that is still so: a name
-- whose key was absent is dropped only if the key is still absent, a name whose key held
-- another type is retyped only if its entry is still the one read and the key still
-- holds that type (a writer may have written the key again since the read: its own
-- index entry stands).
-- KEYS[1] the index; KEYS[2 .. m+1] the keys read absent; KEYS[m+2 ..] the keys read
-- retyped
-- ARGV[1] m; ARGV[2] the prefix of KEYS[2 ..] (each is it and the key's name); then,
-- for each retyped key in order, the entry read, the type read and the new entry
-- Returns how many names were dropped.
local m = tonumber(ARGV[1])
local base = #ARGV[2] + 1
local dropped = 0
for i = 2, m + 1 do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    dropped = dropped + redis.call('HDEL', KEYS[1], string.sub(KEYS[i], base))
  end
end
for i = m + 2, #KEYS do
  local at = 3 + 3 * (i - m - 2)
  local name = string.sub(KEYS[i], base)
  if redis.call('HGET', KEYS[1], name) == ARGV[at]
      and redis.call('TYPE', KEYS[i])['ok'] == ARGV[at + 1] then
    redis.call('HSET', KEYS[1], name, ARGV[at + 2])
  end
end
return dropped
"""

READ_CHANGES = (
    """
-- What changed in an agent's L1 since a stored snapshot, and the keys the caller
-- expects among them, at one instant: one round trip in the usual case.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4] changes, KEYS[5] secondary
-- meta, KEYS[6..] the L1 keys the caller expects changed
-- ARGV[1..n] their names, ARGV[n+1] the stored snapshot's sequence
-- Returns one msgpack blob of {sequence, epoch, the meta's sequence (20 digits, or
-- false), {names changed since}, entry1, type1, value1, ttl1, ...} for the expected keys.
"""
    + _READ_KEYS
    + """
local n = #KEYS - 5
local meta = redis.call('GET', KEYS[5])
if meta then meta = string.sub(meta, 5, 24) end
local changed = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. ARGV[n + 1], '+inf')
local out = {redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3]), meta, changed}
read_keys(out, 6, n, false)
return cmsgpack.pack(out)
"""
)

UNCONFIRMED = "u"
"""First letter of the epoch a restore writes before the snapshot it writes is confirmed
(hashed while Redis wrote it): such a memory is never taken as it is, and
:data:`CONFIRM` gives it its own epoch (``r…``) once confirmed."""


RESTORE = f"""
-- Replace an agent's whole L1 with a snapshot, atomically, as a new epoch.
-- KEYS[1] index, KEYS[2] sequence, KEYS[3] epoch, KEYS[4] changes (emptied: a snapshot
-- of the new epoch reads everything), KEYS[5 .. n+4] the L1 keys to write,
-- KEYS[n+5 ..] stale L1 keys to delete, then the agent's fence (last)
-- ARGV[1] msgpack {{types, values, own_ttl_ms}}, three lists aligned with KEYS[5 .. n+4]:
--         a value is a string, or a flat list (list items; set members; hash field,
--         value, ...; zset score, member, ...); own_ttl_ms > 0 restores a key's own TTL
-- ARGV[2] n; ARGV[3] TTL in ms; ARGV[4] sequence; ARGV[5] the new epoch;
-- ARGV[6] the prefix of KEYS[5 .. n+4] (each is it and the key's name); ARGV[7] the
-- restoring run's token ('' unfenced): refused below the fence, else it becomes the
-- fence; ARGV[8], ARGV[9] the sequence and epoch the stale keys were read at; ARGV[10]
-- the length of ARGV[1] as sent
-- Returns {{n, the length of ARGV[1] as received, how many keys (or the index) do not hold
-- what ARGV[1] says}}, or {{-1, '', 0}} (nothing changed) when the memory was written
-- since the stale keys were read: a key written meanwhile would be left behind. A memory
-- that does not check out is left under an epoch no one takes or confirms.
local data = cmsgpack.unpack(ARGV[1])
local kinds, vals, owns = data[1], data[2], data[3]
local n = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local base = #ARGV[6] + 1
local token = ARGV[7] or ''
{_check_fence("KEYS[#KEYS]", "token")}
local function text(key)  -- a string value, else '' (absent, or another type)
  local v = redis.pcall('GET', key)
  if type(v) == 'string' then return v end
  return ''
end
if (tonumber(text(KEYS[2])) or 0) ~= (tonumber(ARGV[8]) or 0)
    or text(KEYS[3]) ~= (ARGV[9] or '') then
  return {{-1, '', 0}}
end
if token ~= '' then
  redis.call('SET', KEYS[#KEYS], token, 'PX', {FENCE_TTL_MS})
end
local writers = {{list = 'RPUSH', set = 'SADD', hash = 'HSET', zset = 'ZADD'}}
local now = redis.call('TIME')
local stamp = ':' .. ARGV[4] .. ':' .. now[1] .. now[2]
for i = n + 5, #KEYS - 1 do
  redis.call('DEL', KEYS[i])
end
redis.call('DEL', KEYS[1], KEYS[4])
local fields, entries, plain, common = {{}}, {{}}, {{}}, {{}}
for i = 1, n do
  local key, kind, own = KEYS[i + 4], kinds[i], tonumber(owns[i]) or 0
  local entry = entries[kind]
  if not entry then
    entry = kind .. stamp
    entries[kind] = entry
  end
  if own > 0 then entry = entry .. ':own' end
  if kind == 'string' and own <= 0 then
    -- strings of the common life: one MSET per chunk below (cheaper than a SET each)
    plain[#plain + 1] = key
    plain[#plain + 1] = vals[i]
    common[#common + 1] = i + 4  -- its KEYS index, for the TTL below
  elseif kind == 'string' then
    redis.call('SET', key, vals[i], 'PX', own)  -- replaces a key of any type
  else
    redis.call('DEL', key)
    local values = vals[i]
    for j = 1, #values, {MAX_ARGS_PER_CALL} do
      local k = math.min(j + {MAX_ARGS_PER_CALL - 1}, #values)
      redis.call(writers[kind], key, unpack(values, j, k))
    end
    redis.call('PEXPIRE', key, own > 0 and own or ttl)
  end
  fields[#fields + 1] = string.sub(key, base)
  fields[#fields + 1] = entry
end
for j = 1, #plain, {MAX_ARGS_PER_CALL} do  -- MSET replaces a key of any type
  redis.call('MSET', unpack(plain, j, math.min(j + {MAX_ARGS_PER_CALL - 1}, #plain)))
end
for _, k in ipairs(common) do
  redis.call('PEXPIRE', KEYS[k], ttl)
end
for j = 1, #fields, {MAX_ARGS_PER_CALL} do  -- the index, in pairs ({MAX_ARGS_PER_CALL} is even)
  redis.call('HSET', KEYS[1], unpack(fields, j, math.min(j + {MAX_ARGS_PER_CALL - 1}, #fields)))
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl)
redis.call('SET', KEYS[3], ARGV[5], 'PX', ttl)
-- what Redis now holds, confirmed in the same script: every collection's members (a
-- repeated member or field is stored once, so a snapshot holding one does not match;
-- another type is a WRONGTYPE error), the index naming exactly the n keys. A string
-- is stored by SET or MSET exactly as sent, so its size is not read back.
local sizes = {{list = 'LLEN', set = 'SCARD', hash = 'HLEN', zset = 'ZCARD'}}
local bad = 0
for i = 1, n do
  local kind = kinds[i]
  if kind ~= 'string' then
    local want = #vals[i]
    if kind == 'hash' or kind == 'zset' then want = want / 2 end
    if redis.call(sizes[kind], KEYS[i + 4]) ~= want then bad = bad + 1 end
  end
end
if redis.call('HLEN', KEYS[1]) ~= n then bad = bad + 1 end
if bad > 0 or #ARGV[1] ~= tonumber(ARGV[10]) then
  redis.call('SET', KEYS[3], '{UNCONFIRMED}x' .. ARGV[5], 'PX', ttl)
end
return {{n, #ARGV[1], bad}}
"""


def unconfirmed(epoch: str | bytes | None) -> bool:
    """Whether ``epoch`` (as Redis returns it, or decoded) is one a restore wrote and did
    not confirm (:data:`UNCONFIRMED`)."""
    if isinstance(epoch, bytes):
        epoch = epoch.decode("utf-8", "replace")
    return epoch is not None and epoch.startswith(UNCONFIRMED)


CONFIRM = (
    """
-- An agent's epoch swapped, if it is still the one expected: a restore's memory
-- confirmed (its epoch, written unconfirmed, becomes its own), or a memory that lost
-- writes disowned (its epoch becomes an unconfirmed one).
-- KEYS[1] the agent's epoch, KEYS[2] its fence
-- ARGV[1] the epoch expected, ARGV[2] the new one, ARGV[3] the run's token ('' unfenced).
-- The epoch keeps the TTL it had, with the memory's keys.
-- Returns 1, or 0 when the memory is no longer the one expected (nothing changes).
"""
    + _check_fence("KEYS[2]", "ARGV[3]")
    + """
local epoch = redis.call('GET', KEYS[1])
if epoch == ARGV[2] then return 1 end  -- confirmed already (sent again)
if epoch ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
"""
)

FENCE = (
    """
-- A run takes an agent's memory over: the fence becomes its token, unless a later run
-- holds a higher one (then AMBER_FENCED, and nothing changes).
-- KEYS[1] the agent's fence; ARGV[1] the run's token
"""
    + _check_fence("KEYS[1]", "ARGV[1]")
    + f"""
redis.call('SET', KEYS[1], ARGV[1], 'PX', {FENCE_TTL_MS})
return 1
"""
)

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

CACHE = f"""
-- The Redis copies of one checkpoint, each never written over a newer one: the
-- checkpoint backup (a sealed value) and the L1 secondary (a hash of one field per key,
-- and its sealed meta), the latter written whole or as a delta on the snapshot it has.
-- KEYS[1] backup, KEYS[2] secondary hash, KEYS[3] secondary meta, KEYS[4] the agent's
-- changes zset
-- ARGV[1] backup value, ARGV[2] its checkpoint sequence (20 digits), ARGV[3] its TTL ms,
-- ARGV[4] meta value, ARGV[5] the snapshot's sequence (20 digits), ARGV[6] its TTL ms,
-- ARGV[7] the sequence (20 digits) the delta applies to, or '' for a whole snapshot,
-- ARGV[8] how many fields are set, ARGV[9 ..] field, value pairs, then names to delete
-- Returns {{backup written (0/1), secondary: 1 written, 0 newer kept, -1 needs it whole}}.
local function head(key)  -- a sealed value's magic and sequence, not the value itself
  local ok, old = pcall(redis.call, 'GETRANGE', key, 0, 23)
  if not ok then redis.call('DEL', key) return '' end  -- another type: not ours to keep
  return old
end
local function newer(old, seq)
  return string.sub(old, 1, 4) == 'AMB1' and string.sub(old, 5, 24) > seq
end
local backup = 0
if ARGV[1] ~= '' and not newer(head(KEYS[1]), ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  backup = 1
end
local meta = head(KEYS[3])
if newer(meta, ARGV[5]) then return {{backup, 0}} end
if ARGV[7] ~= '' then
  if string.sub(meta, 5, 24) ~= ARGV[7] then return {{backup, -1}} end
else
  redis.call('DEL', KEYS[2])
end
if redis.call('TYPE', KEYS[2])['ok'] ~= 'hash' then redis.call('DEL', KEYS[2]) end
local sets = tonumber(ARGV[8])
local last = 8 + 2 * sets
for i = 9, last, {2 * MAX_ARGS_PER_CALL} do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + {2 * MAX_ARGS_PER_CALL - 1}, last)))
end
for i = last + 1, #ARGV, {MAX_ARGS_PER_CALL} do
  redis.call('HDEL', KEYS[2], unpack(ARGV, i, math.min(i + {MAX_ARGS_PER_CALL - 1}, #ARGV)))
end
redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[6])  -- none when the hash is empty: 0, no error
if ARGV[7] ~= '' then  -- changes up to the delta's base are in a stored snapshot now
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', tonumber(ARGV[7]))
end
return {{backup, 1}}
"""


register_idempotent(READ, READ_CHANGES, REPAIR_INDEX, CACHE, WRITE_SEALED, CONFIRM)
