"""Snapshots are points in time; restores are atomic, verified, and fall back tier by tier."""

from __future__ import annotations

import threading
import uuid

import orjson
import pytest

import amber
from amber import ConsistencyError, codec
from amber.memory import AgentMemory, read_memory

from .conftest import fill, insert_checkpoint


def test_round_trip_through_the_secondary(stack: amber.Stack, mem: AgentMemory) -> None:
    before = read_memory(stack.redis, stack.keys, mem.agent_id)
    meta = stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, uuid.uuid4())
    assert meta.hash == before.hash and meta.key_count == 6 and meta.seq == mem.sequence()
    mem.clear()
    mem.set("stale", "left over")
    report = stack.restorer.restore_from_snapshot(mem.agent_id, uuid.uuid4(), "strategy")
    assert report is not None and report.source == "redis_secondary" and report.keys == 6
    after = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert after.memory == before.memory and after.seq == meta.seq
    assert not mem.exists("stale")
    assert 0 < mem.ttl("blob") <= stack.settings.active_ttl


def test_snapshot_is_a_point_in_time(stack: amber.Stack, agent_id: str) -> None:
    mem = stack.memory(agent_id)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            mem.hset("pair", mapping={"a": i, "b": i})  # one atomic write
            mem.set(f"k{i % 7}", i)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(100):
            snap = read_memory(stack.redis, stack.keys, agent_id)
            if "pair" in snap.memory:
                pair = snap.memory["pair"].value
                assert pair[b"a"] == pair[b"b"]  # type: ignore[index]
    finally:
        stop.set()
        t.join()


def test_pg_fallback_when_secondary_is_missing(stack: amber.Stack, mem: AgentMemory) -> None:
    analysis = str(uuid.uuid4())
    cid = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    meta = stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    stack.redis.delete(stack.keys.l1_snapshot(mem.agent_id))
    mem.clear()
    report = stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")
    assert report is not None and report.source == "postgresql_checkpoint"
    assert read_memory(stack.redis, stack.keys, mem.agent_id).hash == meta.hash


def _tamper_value(doc: dict) -> None:  # type: ignore[type-arg]
    doc["keys"]["current_subtask"]["value"] = "historical_roi"


def _drop_key(doc: dict) -> None:  # type: ignore[type-arg]
    del doc["keys"]["tickers"]


def _add_key(doc: dict) -> None:  # type: ignore[type-arg]
    doc["keys"]["intruder"] = {"type": "string", "value": "x", "ttl_ms": -1}


def _change_type(doc: dict) -> None:  # type: ignore[type-arg]
    doc["keys"]["current_subtask"]["type"] = "set"
    doc["keys"]["current_subtask"]["value"] = ["ma_review"]


def _reorder_list(doc: dict) -> None:  # type: ignore[type-arg]
    doc["keys"]["aapl_historical_roi"]["value"].reverse()


TAMPERS = [_tamper_value, _drop_key, _add_key, _change_type, _reorder_list]


@pytest.mark.parametrize("tamper", TAMPERS)
def test_corrupt_secondary_is_detected_and_pg_serves(
    stack: amber.Stack, mem: AgentMemory, tamper: object
) -> None:
    analysis = str(uuid.uuid4())
    cid = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    meta = stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    key = stack.keys.l1_snapshot(mem.agent_id)  # a hash: one field per key
    fields = stack.redis.hgetall(key)
    doc = {"keys": {}}  # type: ignore[var-annotated]
    for name, item in fields.items():  # type: ignore[union-attr]
        rtype, value, ttl = orjson.loads(item)
        doc["keys"][name.decode()] = {"type": rtype, "value": value, "ttl_ms": ttl}
    tamper(doc)  # type: ignore[operator]
    stack.redis.delete(key)
    stack.redis.hset(
        key,
        mapping={
            n: orjson.dumps([it["type"], it["value"], it["ttl_ms"]])
            for n, it in doc["keys"].items()
        },
    )  # the meta is untouched: its hash no longer matches
    report = stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")
    assert report is not None and report.source == "postgresql_checkpoint"
    assert read_memory(stack.redis, stack.keys, mem.agent_id).hash == meta.hash


@pytest.mark.parametrize("tamper", TAMPERS)
def test_corrupt_postgres_snapshot_is_detected(
    stack: amber.Stack, mem: AgentMemory, tamper: object
) -> None:
    analysis = str(uuid.uuid4())
    cid = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    stack.redis.delete(stack.keys.l1_snapshot(mem.agent_id))
    with stack.pg.connection() as conn:
        blob = conn.execute(
            "SELECT l1_snapshot FROM agent_checkpoints WHERE checkpoint_id = %s", (cid,)
        ).fetchone()[0]  # type: ignore[index]
        doc = orjson.loads(codec.unpack(blob))
        tamper(doc)  # type: ignore[operator]
        conn.execute(
            "UPDATE agent_checkpoints SET l1_snapshot = %s WHERE checkpoint_id = %s",
            (codec.pack(orjson.dumps(doc)), cid),
        )
    with pytest.raises(ConsistencyError, match="postgresql_checkpoint"):
        stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")


@pytest.mark.parametrize("garbage", [b"\x00not zstd", b"", "flip"])
def test_garbage_secondary_is_reported_not_trusted(
    stack: amber.Stack, mem: AgentMemory, garbage: bytes | str
) -> None:
    stack.snapshotter.snapshot_on_checkpoint(mem.agent_id)
    key = stack.keys.l1_snapshot(mem.agent_id)
    if garbage == "flip":  # one bit flipped inside one key's stored value
        item = bytearray(stack.redis.hget(key, "current_subtask"))  # type: ignore[arg-type]
        item[len(item) // 2] ^= 0x01
        stack.redis.hset(key, "current_subtask", bytes(item))
    else:
        stack.redis.delete(key)
        stack.redis.set(key, garbage)
    with pytest.raises(ConsistencyError, match="redis_secondary"):
        stack.restorer.restore_from_snapshot(mem.agent_id, uuid.uuid4(), "strategy")


def test_no_snapshot_anywhere_returns_none(stack: amber.Stack, agent_id: str) -> None:
    assert stack.restorer.restore_from_snapshot(agent_id, uuid.uuid4(), "strategy") is None


def test_verifier_catches_partial_restore(stack: amber.Stack, mem: AgentMemory) -> None:
    snap = read_memory(stack.redis, stack.keys, mem.agent_id)
    stack.redis.delete(mem.key("tickers"))
    with pytest.raises(ConsistencyError, match="does not match"):
        stack.verifier.verify(mem.agent_id, snap.hash, len(snap.memory))


def test_restore_of_large_memory(stack: amber.Stack, agent_id: str) -> None:
    mem = stack.memory(agent_id)
    with stack.redis.pipeline(transaction=False):
        for i in range(300):
            mem.set(f"k{i}", f"v{i}" * 20)
    fill(mem)
    snap = read_memory(stack.redis, stack.keys, agent_id)
    stack.snapshotter.store(snap)
    mem.clear()
    report = stack.restorer.restore_from_snapshot(agent_id, uuid.uuid4(), "t")
    assert report is not None and report.keys == 306
    assert codec.memory_hash(read_memory(stack.redis, stack.keys, agent_id).memory) == snap.hash


def test_corrupt_newest_pg_snapshot_falls_back_to_an_older_one(
    stack: amber.Stack, mem: AgentMemory
) -> None:
    analysis = str(uuid.uuid4())
    older = stack.snapshotter.snapshot_on_checkpoint(
        mem.agent_id, insert_checkpoint(stack, analysis, "strategy", mem.agent_id), dual_write=True
    )
    mem.set("later", "x")
    newest = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, newest, dual_write=True)
    stack.redis.delete(stack.keys.l1_snapshot(mem.agent_id))
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE agent_checkpoints SET l1_snapshot = %s WHERE checkpoint_id = %s",
            (b"not zstd", newest),
        )
    report = stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")
    assert report is not None and report.source == "postgresql_checkpoint"
    assert report.hash == older.hash and report.seq == older.seq and not mem.exists("later")


def test_chunked_read_of_a_big_memory_is_a_point_in_time(stack: amber.Stack, agent_id: str) -> None:
    from amber.memory.snapshot import READ_CHUNK

    mem = stack.memory(agent_id)
    names = [f"k{i:05d}" for i in range(READ_CHUNK * 2 + 10)]
    for name in names:
        mem.set(name, 0)
    first, last = names[0], names[-1]  # in the first and the last chunk
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            mem.set(first, i)
            mem.set(last, i)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(20):
            snap = read_memory(stack.redis, stack.keys, agent_id)
            a, z = (int(snap.memory[n].value) for n in (first, last))  # type: ignore[arg-type]
            assert z <= a <= z + 1
            assert len(snap.memory) == len(names)
    finally:
        stop.set()
        t.join()
    mem.clear()
