"""Lua scripts of amber.langgraph's Redis hot copies. Each touches one key, so one slot.

A thread's hot copies live in one hash (``Keys.lg_heads``), two fields per namespace:
``copy:<ns>`` holds the sealed copy (``codec.seal``) of the namespace's newest
checkpoint and ``head:<ns>`` names it: ``<seq, 20 digits>:<checkpoint id>``, so a
reader learns whether the copy is the one it wants without fetching it, and a writer
compares sequences without reading the copy.
"""

from __future__ import annotations

WRITE_HEAD = """
-- Store a namespace's hot copy unless a newer one is there: a slow or stale writer never
-- replaces a newer copy.
-- KEYS[1] the thread's heads hash
-- ARGV[1] the copy's field, ARGV[2] the head's field, ARGV[3] the sealed copy,
-- ARGV[4] its head ('<seq 20 digits>:<checkpoint id>'), ARGV[5] TTL in ms
-- Returns 1 if written, 0 if a newer copy was kept.
local ok, head = pcall(redis.call, 'HGET', KEYS[1], ARGV[2])
if not ok then
  redis.call('DEL', KEYS[1])  -- a key of another type: not ours to keep
  head = false
end
if head and string.sub(head, 1, 20) > string.sub(ARGV[4], 1, 20) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

READ_HEAD = """
-- A namespace's hot copy, if it is the checkpoint wanted.
-- KEYS[1] the thread's heads hash
-- ARGV[1] the copy's field, ARGV[2] the head's field, ARGV[3] the wanted checkpoint id
-- ('' for the newest)
-- Returns {head, sealed copy}, or nil.
local ok, head = pcall(redis.call, 'HGET', KEYS[1], ARGV[2])
if not ok or not head then
  return false
end
if ARGV[3] ~= '' and string.sub(head, 22) ~= ARGV[3] then
  return false
end
return {head, redis.call('HGET', KEYS[1], ARGV[1])}
"""


def copy_field(ns: str) -> str:
    """Field of a namespace's sealed hot copy."""
    return f"copy:{ns}"


def head_field(ns: str) -> str:
    """Field naming a namespace's hot copy."""
    return f"head:{ns}"


def head_name(seq: int, checkpoint_id: str) -> str:
    """``<seq, 20 digits>:<checkpoint id>``: what ``head_field`` holds."""
    return f"{seq:020d}:{checkpoint_id}"
