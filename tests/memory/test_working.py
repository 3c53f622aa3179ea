"""AgentMemory: redis-py names, bytes in and out, an index kept in step with every write."""

from __future__ import annotations

import pytest

import amber
from amber import InvalidIdentifier, InvalidValue, UnsupportedType, WrongType
from amber.memory import AgentMemory, read_memory

from .conftest import BINARY


def test_every_type_reads_back_as_bytes(mem: AgentMemory) -> None:
    assert mem.get("current_subtask") == b"ma_review"
    assert mem.get("blob") == BINARY
    assert mem.lrange("aapl_historical_roi", 0, -1) == [b"0.15", b"0.18", b"0.12"]
    assert mem.llen("aapl_historical_roi") == 3
    assert mem.hget("api_cache:koyfin_aapl_acquisitions", b"\xff") == b"\x00\x01"
    assert mem.hgetall("api_cache:koyfin_aapl_acquisitions")[b"deals"] == b"3"
    assert len(mem.smembers("tickers")) == 500
    assert mem.zrange("ranks", -1, -1, withscores=True) == [(b"top", float("inf"))]
    assert mem.type("ranks") == "zset" and mem.type("nothing") == "none"
    assert mem.exists("blob") and not mem.exists("nothing")


def test_index_follows_writes_deletes_and_emptied_keys(mem: AgentMemory) -> None:
    names = {
        "current_subtask",
        "blob",
        "aapl_historical_roi",
        "api_cache:koyfin_aapl_acquisitions",
        "tickers",
        "ranks",
    }
    assert set(mem.keys_list()) == names
    seq = mem.sequence()
    assert mem.delete("blob", "nothing") == 1
    mem.hdel("api_cache:koyfin_aapl_acquisitions", "deals", b"\xff")  # emptied
    mem.lpush("fresh", "x")
    assert set(mem.keys_list()) == names - {"blob", "api_cache:koyfin_aapl_acquisitions"} | {
        "fresh"
    }
    assert mem.sequence() == seq + 3
    assert mem.clear() == 5 and mem.keys_list() == []


def test_writes_carry_the_active_ttl(stack: amber.Stack, mem: AgentMemory) -> None:
    assert 0 < mem.ttl("blob") <= stack.settings.active_ttl
    assert stack.redis.ttl(stack.keys.l1_index(mem.agent_id)) > 0


def test_bad_input_gets_clear_errors(mem: AgentMemory, stack: amber.Stack) -> None:
    with pytest.raises(InvalidIdentifier):
        stack.memory("bad*agent")
    with pytest.raises(InvalidIdentifier):
        mem.set("key[0]", "x")
    with pytest.raises(WrongType, match="current_subtask"):
        mem.rpush("current_subtask", "x")
    with pytest.raises(WrongType):
        mem.lrange("current_subtask", 0, -1)
    with pytest.raises(InvalidValue):
        mem.rpush("empty")
    with pytest.raises(InvalidValue, match="odd"):
        mem.set("odd", object())  # type: ignore[arg-type]
    assert mem.get("current_subtask") == b"ma_review"  # nothing lost


def test_unsupported_type_from_another_client_is_named(
    mem: AgentMemory, stack: amber.Stack
) -> None:
    stack.redis.delete(mem.key("blob"))
    stack.redis.xadd(mem.key("blob"), {"f": "v"})
    with pytest.raises(UnsupportedType, match=r"'blob'.*stream"):
        read_memory(stack.redis, stack.keys, mem.agent_id)
