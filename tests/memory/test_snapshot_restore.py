"""Snapshots are points in time; restores are atomic, verified, and fall back tier by tier."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest

import amber
from amber import ConsistencyError, MemoryLost, codec
from amber.memory import AgentMemory, read_memory
from amber.memory.apply import apply_memory

from ..conftest import Engines, on_cluster
from .conftest import Writer, fill, insert_checkpoint


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
    if not on_cluster():  # the secondary, read while PostgreSQL was, gave its connection back
        assert not stack.redis.connection_pool._in_use_connections  # type: ignore[attr-defined]


def test_a_restore_from_postgresql_writes_every_type_and_ttl_as_stored(
    stack: amber.Stack, mem: AgentMemory
) -> None:
    """A restore writes the stored form as it is (text strings packed unchanged, binary
    ones decoded, collections flattened; strings of the common life in one MSET): every
    value comes back equal, an own TTL comes back, the others get the active TTL."""
    mem.set("own_text", "keeps its own life")
    mem.expire("own_text", 500)
    mem.expire("api_cache:koyfin_aapl_acquisitions", 400)
    mem.set("nul", b"a\x00b")
    mem.set("accents", "été ünïcode ✓")
    analysis = str(uuid.uuid4())
    cid = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    before = read_memory(stack.redis, stack.keys, mem.agent_id)
    stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    stack.redis.delete(stack.keys.l1_snapshot(mem.agent_id))
    mem.clear()
    mem.rpush("own_text", "another type where a string goes")  # replaced, whatever its type
    report = stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")
    assert report is not None and report.source == "postgresql_checkpoint"
    after = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert after.hash == before.hash
    assert {n: (e.type, e.value) for n, e in after.memory.items()} == {
        n: (e.type, e.value) for n, e in before.memory.items()
    }
    assert 400 < mem.ttl("own_text") <= 500
    assert 300 < mem.ttl("api_cache:koyfin_aapl_acquisitions") <= 400
    for name in ("current_subtask", "blob", "nul", "accents", "tickers", "ranks"):
        assert 500 < mem.ttl(name) <= stack.settings.active_ttl, name


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
    _tamper_row(stack, cid, tamper)  # type: ignore[arg-type]
    with pytest.raises(ConsistencyError, match="postgresql_checkpoint"):
        stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")


def _tamper_row(stack: amber.Stack, cid: str, tamper: Callable[[dict[str, Any]], None]) -> None:
    """Change the snapshot a checkpoint row holds (and its size), leaving its hash."""
    with stack.pg.connection() as conn:
        blob = conn.execute(
            "SELECT l1_snapshot FROM agent_checkpoints WHERE checkpoint_id = %s", (cid,)
        ).fetchone()[0]  # type: ignore[index]
        doc = orjson.loads(codec.unpack(blob))
        tamper(doc)
        raw = orjson.dumps(doc)
        conn.execute(
            "UPDATE agent_checkpoints SET l1_snapshot = %s, l1_snapshot_size = %s"
            " WHERE checkpoint_id = %s",
            (codec.pack(raw), len(raw), cid),
        )


@pytest.mark.parametrize("sendable", [True, False], ids=["sent", "send failed"])
@pytest.mark.parametrize("tampered", [False, True], ids=["sound", "tampered"])
@pytest.mark.parametrize("lost", [True, False], ids=["over a lost memory", "over one with keys"])
def test_a_snapshot_from_postgresql_is_hashed_while_redis_writes_it_over_a_lost_memory(
    stack: amber.Stack,
    mem: AgentMemory,
    monkeypatch: pytest.MonkeyPatch,
    lost: bool,
    tampered: bool,
    sendable: bool,
) -> None:
    """Over a memory that holds no keys, a snapshot read from PostgreSQL is hashed while
    Redis writes it (the script goes out first); one that does not match is then
    replaced by an empty memory before the error, so nothing of it is left to be read.
    Over a memory with keys it is hashed before anything is sent, and one that does not
    match leaves those keys as they were. Where the script cannot go out on a held
    connection (a cluster client has none; the send failed), it is hashed first and
    written as the memory's own, with nothing to confirm."""
    from amber.memory import apply

    analysis = str(uuid.uuid4())
    cid = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    meta = stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    secondary = (stack.keys.l1_snapshot(mem.agent_id), stack.keys.l1_snapshot_meta(mem.agent_id))
    stack.redis.delete(*secondary)  # PostgreSQL's is the one
    if tampered:
        _tamper_row(stack, cid, _tamper_value)
    if lost:
        apply_memory(stack.redis, stack.keys, mem.agent_id, {}, 0, 60_000)
    before = read_memory(stack.redis, stack.keys, mem.agent_id)
    order: list[str] = []
    send, check = apply.Pending.send, stack.verifier.check_snapshot

    def sent(*args: Any) -> Any:
        pending = send(*args) if sendable else None
        if pending is not None:  # None: no connection to hold (a cluster client)
            order.append("sent")
        return pending

    monkeypatch.setattr(apply.Pending, "send", sent)
    monkeypatch.setattr(
        stack.verifier, "check_snapshot", lambda *a: order.append("hashed") or check(*a)
    )
    confirm = apply._confirm
    monkeypatch.setattr(apply, "_confirm", lambda *a: order.append("confirmed") or confirm(*a))
    if tampered:
        with pytest.raises(ConsistencyError, match="postgresql_checkpoint"):
            stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")
    else:
        report = stack.restorer.restore_from_snapshot(mem.agent_id, analysis, "strategy")
        assert report is not None and report.source == "postgresql_checkpoint"
    # over a lost memory the script goes out on a held connection before the hash; the
    # empty memory that replaces a tampered one, and a restore over keys, go the usual way
    # and only what was written before its hash is confirmed after it (a cluster client
    # holds no connection of its own: there the hash comes first, and nothing to confirm)
    overlapped = lost and sendable and not on_cluster()
    expected = ["sent", "hashed"] if overlapped else ["hashed"]
    assert order == expected + (["confirmed"] if overlapped and not tampered else [])
    after = read_memory(stack.redis, stack.keys, mem.agent_id)
    if not tampered:
        assert after.hash == meta.hash and len(after.memory) == len(before.memory or after.memory)
        assert after.epoch is not None and after.epoch.startswith("r")  # confirmed
        ttl = [
            stack.redis.pttl(k(mem.agent_id)) for k in (stack.keys.l1_epoch, stack.keys.l1_index)
        ]
        assert 0 < ttl[0] <= ttl[1] + 50  # the epoch kept the TTL the restore gave the memory
    elif lost:
        assert after.memory == {} and not after.missing
    else:
        assert (after.hash, after.epoch, after.seq) == (before.hash, before.epoch, before.seq)


_KILLED_WHILE_WRITING = """
import os, signal, sys
import amber
redis_url, database_url, prefix, agent_id, analysis = sys.argv[1:]
with amber.connect(redis_url, database_url, prefix=prefix) as stack:
    stack.verifier.check_snapshot = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
    stack.restorer.restore_from_snapshot(agent_id, analysis, "strategy")
"""


def test_a_restore_killed_before_its_snapshot_was_confirmed_is_never_taken_as_it_is(
    stack: amber.Stack, mem: AgentMemory, engines: Engines
) -> None:
    """A process restoring a lost memory is killed (SIGKILL) while Redis writes the
    snapshot it is hashing: what Redis wrote carries an unconfirmed epoch, which no
    recovery takes as it is; the next one restores the snapshot again, and confirms it."""
    from amber.memory import scripts
    from amber.memory.recovery import l1_complete

    analysis = str(uuid.uuid4())
    cid = insert_checkpoint(stack, analysis, "strategy", mem.agent_id)
    meta = stack.snapshotter.snapshot_on_checkpoint(mem.agent_id, cid, dual_write=True)
    secondary = (stack.keys.l1_snapshot(mem.agent_id), stack.keys.l1_snapshot_meta(mem.agent_id))
    stack.redis.delete(*secondary)
    apply_memory(stack.redis, stack.keys, mem.agent_id, {}, 0, 60_000)  # as if Redis lost it
    args = [engines.redis_url, engines.database_url, engines.prefix, mem.agent_id, analysis]
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WHILE_WRITING, *args], capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    left = read_memory(stack.redis, stack.keys, mem.agent_id)
    if on_cluster():  # no connection to hold: hashed before anything was sent
        assert left.memory == {}
        return
    assert left.memory and left.epoch is not None and left.epoch.startswith(scripts.UNCONFIRMED)
    ok, why = l1_complete(left, None)
    assert not ok and "never confirmed" in why
    # nor snapshotted, nor checkpointed, by anyone who did not recover it (unguarded too)
    with pytest.raises(MemoryLost, match="did not finish"):
        stack.snapshotter.store(stack.snapshotter.take(mem.agent_id, full=True))
    with pytest.raises(MemoryLost, match="did not finish"):
        stack.checkpointer.save_checkpoint(
            Writer(analysis, "AAPL", stack.memory(mem.agent_id)), None
        )
    report = stack.recovery.recover_agent_state(mem.agent_id, analysis, "strategy")
    assert report.path == "postgresql_checkpoint" and report.verified
    after = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert after.hash == meta.hash and after.epoch == report.epoch
    assert after.epoch is not None and after.epoch.startswith("r")


def test_a_check_failing_while_redis_writes_a_restore_it_refused_changes_nothing(
    stack: amber.Stack, mem: AgentMemory
) -> None:
    """The script refuses a memory written since its index was read: the check that
    failed meanwhile is raised, and nothing is replaced (there is nothing to take back)."""
    from amber.memory.apply import Held, apply_canon

    now = read_memory(stack.redis, stack.keys, mem.agent_id)

    def fail() -> None:
        raise ConsistencyError("the snapshot does not match its hash")

    stale = Held((), now.seq - 1, now.epoch)  # as if written since it was read
    with pytest.raises(ConsistencyError, match="does not match its hash"):
        apply_canon(stack.redis, stack.keys, mem.agent_id, now.canon, now.seq, 60_000,
                    held=stale, during=fail)  # fmt: skip
    after = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert (after.hash, after.epoch, after.seq) == (now.hash, now.epoch, now.seq)


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


@pytest.mark.parametrize(
    ("fault", "where"),
    [
        (
            "redis.call(writers[kind], key, unpack(values, j, k))",
            "redis.call(writers[kind], key, unpack(values, 1, 2))",
        ),
        (
            "#ARGV[1]",  # what arrived, as the script sees it: in its check and its reply
            "(#ARGV[1] - 1)",
        ),
    ],
    ids=["a collection written short", "the payload cut short"],
)
def test_a_restore_is_verified_by_the_script_that_writes_it(
    stack: amber.Stack, mem: AgentMemory, monkeypatch: pytest.MonkeyPatch, fault: str, where: str
) -> None:
    """The restore writes and verifies in one pass: Redis confirms the payload it got and
    every collection's members; a script that stored anything else is caught (read
    back, nothing else would tell). A string is stored by SET or MSET as it arrived."""
    from amber.memory import apply, scripts

    snap = read_memory(stack.redis, stack.keys, mem.agent_id)
    sound = scripts.RESTORE
    assert fault in sound
    monkeypatch.setattr(scripts, "RESTORE", sound.replace(fault, where))
    with pytest.raises(ConsistencyError, match="does not match its snapshot"):
        apply_memory(stack.redis, stack.keys, mem.agent_id, snap.memory, snap.seq, 60_000)
    # what it left is under an epoch nothing takes as it is
    assert scripts.unconfirmed(read_memory(stack.redis, stack.keys, mem.agent_id).epoch)
    # over a lost memory, hashed while Redis writes it: the confirmation sent behind the
    # script (the hash having passed) does not confirm what the script found wrong
    monkeypatch.setattr(scripts, "RESTORE", sound)
    apply_memory(stack.redis, stack.keys, mem.agent_id, {}, 0, 60_000)
    monkeypatch.setattr(scripts, "RESTORE", sound.replace(fault, where))
    held = apply.read_held(stack.redis, stack.keys, mem.agent_id)
    with pytest.raises(ConsistencyError, match="does not match its snapshot"):
        apply.apply_canon(
            stack.redis, stack.keys, mem.agent_id, snap.canon, snap.seq, 60_000,
            held=held, during=lambda: None,
        )  # fmt: skip
    left = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert left.memory and scripts.unconfirmed(left.epoch)


def test_a_restore_over_a_lost_memory_is_confirmed_in_the_scripts_round_trip(
    stack: amber.Stack, mem: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the hash has passed, the confirmation goes out behind the restore's script on
    the same connection: one wait reads both replies, and nothing is sent after. Where
    no connection can be held (a cluster client) the memory is hashed first and written
    as its own, with nothing to confirm."""
    from amber.memory import apply

    snap = read_memory(stack.redis, stack.keys, mem.agent_id)
    apply_memory(stack.redis, stack.keys, mem.agent_id, {}, 0, 60_000)  # as if Redis lost it
    held = apply.read_held(stack.redis, stack.keys, mem.agent_id)
    after_script: list[tuple[Any, ...]] = []
    more = apply.Pending.send_more
    monkeypatch.setattr(
        apply.Pending, "send_more", lambda self, c: after_script.extend(c) or more(self, c)
    )
    sent_alone: list[str] = []
    confirm = apply._confirm
    monkeypatch.setattr(apply, "_confirm", lambda *a: sent_alone.append(repr(a[-1])) or confirm(*a))
    epoch = apply.apply_canon(
        stack.redis, stack.keys, mem.agent_id, snap.canon, snap.seq, 60_000,
        held=held, during=lambda: None,
    )  # fmt: skip
    after = read_memory(stack.redis, stack.keys, mem.agent_id)
    assert after.epoch == epoch and epoch.startswith("r") and after.hash == snap.hash
    if on_cluster():
        assert not after_script and not sent_alone
    else:  # sent behind the script, its reply (1) handed over: nothing sent on its own
        assert [c[1] for c in after_script] == [apply.CONFIRM_SHA] and sent_alone == ["1"]


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


def test_a_chunked_read_of_every_type_equals_one_script_reading_it_all(
    stack: amber.Stack, agent_id: str
) -> None:
    from amber.memory.snapshot import READ_CHUNK, Snapshot, _Reader

    mem = stack.memory(agent_id)
    with mem.batch() as b:
        for i in range(READ_CHUNK * 2 + 7):
            kind = i % 5
            name = f"k{i:05d}"
            if kind == 0:
                b.set(name, f"v{i}")
            elif kind == 1:
                b.rpush(name, i, "x")
            elif kind == 2:
                b.hset(name, {"f": i})
            elif kind == 3:
                b.sadd(name, i, "m")
            else:
                b.zadd(name, {"m": i / 3})
    assert mem.expire("k00001", 100)  # a TTL of its own
    retyped = mem.key("k00005")  # indexed as a string, now a list (another client)
    stack.redis.delete(retyped)
    stack.redis.rpush(retyped, "a", "b")
    chunked = read_memory(stack.redis, stack.keys, agent_id)
    reader = _Reader(stack.redis, stack.keys, agent_id)
    whole = reader.read_whole([sorted(mem.keys_list())])  # one script, all of it
    assert whole is not None

    def values(snap: Snapshot) -> dict[str, tuple[str, object]]:
        return {n: (e.type, e.value) for n, e in snap.memory.items()}  # TTLs count down

    assert values(chunked) == values(whole) and chunked.hash == whole.hash
    assert chunked.hash == codec.memory_hash(chunked.memory)
    assert chunked.memory["k00005"] == codec.Entry("list", [b"a", b"b"])
    assert chunked.memory["k00001"].ttl_ms > 0 and chunked.owned == {"k00001"}
    assert chunked.memory["k00000"].value == b"v0"
    mem.clear()


def test_a_connection_lost_in_the_middle_of_a_chunked_read_starts_it_over(
    stack: amber.Stack, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunks after the first share one connection; when it breaks (a failover, a
    restart) the read starts over through the retrying client, instead of failing."""
    import redis

    from amber.memory.snapshot import READ_CHUNK

    mem = stack.memory(agent_id)
    with mem.batch() as b:
        for i in range(READ_CHUNK * 3):
            b.set(f"k{i:05d}", i)
    expected = read_memory(stack.redis, stack.keys, agent_id)
    real = redis.connection.AbstractConnection.read_response
    calls = {"n": 0}

    def flaky(self: redis.connection.AbstractConnection, *args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:  # a reply of a chunk sent ahead
            self.disconnect()
            raise redis.ConnectionError("connection lost (injected)")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(redis.connection.AbstractConnection, "read_response", flaky)
    again = read_memory(stack.redis, stack.keys, agent_id)
    monkeypatch.undo()
    assert calls["n"] > 3
    assert again.memory == expected.memory and again.hash == expected.hash
    mem.clear()


def test_a_read_repairs_the_index_only_where_what_it_saw_still_holds(
    stack: amber.Stack, agent_id: str
) -> None:
    """A read that found a key absent, or of another type, repairs the index in one
    script that looks again: a key written since the read keeps its entry. Dropped
    blindly, a key a writer had just written back would be hidden from every later
    snapshot, and lost with Redis."""
    from amber.memory.read import _Reader

    mem = stack.memory(agent_id)
    names = ["back", "gone", "typed", "listed", "stays"]
    for name in names:
        mem.set(name, "before")
    stack.redis.delete(*(mem.key(n) for n in ("back", "gone", "typed", "listed")))
    stack.redis.rpush(mem.key("typed"), "a")  # another client made them lists
    stack.redis.rpush(mem.key("listed"), "a")
    reader = _Reader(stack.redis, stack.keys, agent_id)
    items = reader.read(names, None, None)
    assert items is not None
    mem.set("back", "written again")  # between the read and its repair
    stack.redis.set(mem.key("typed"), "a string again")  # and the other client again
    seen = reader.decode(names, items)
    assert set(seen.expired) == {"back", "gone"}
    index = stack.redis.hgetall(stack.keys.l1_index(agent_id))
    assert b"gone" not in index and b"back" in index
    assert index[b"typed"].startswith(b"string:")
    assert index[b"listed"].startswith(b"list:")  # still a list: the index follows it
    after = read_memory(stack.redis, stack.keys, agent_id).memory
    assert after["back"].value == b"written again" and after["typed"].value == b"a string again"
    assert set(after) == {"back", "typed", "listed", "stays"} and after["listed"].type == "list"
