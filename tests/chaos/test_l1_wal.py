"""The ``wal`` durability mode: a Redis restart between checkpoints loses nothing acknowledged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import amber
from amber.engines.embedded import EmbeddedRedis
from amber.examples import ANALYSTS, MarketDataClient
from amber.memory import read_memory

from ..checkpoints.test_checkpointer import Probe
from ..conftest import Engines

pytestmark = pytest.mark.chaos


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "r")
    server.ensure()
    yield server
    server.stop()


def _stack(
    engines: Engines, server: EmbeddedRedis, data_dir: Path, fsync: str = "batch"
) -> amber.Stack:
    return amber.connect(
        server.url,
        engines.database_url,
        data_dir,
        engines.prefix,
        durability="wal",
        wal_fsync=fsync,
    )


def _restart(server: EmbeddedRedis) -> None:
    server.stop()
    server.ensure()


def test_restart_between_checkpoints_loses_nothing(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    with _stack(engines, redis_server, tmp_path / "d") as stack:
        agent = Probe(str(uuid.uuid4()), "AAPL", stack.memory(f"wal-{uuid.uuid4().hex[:6]}"))
        mem = agent.l1_cache
        mem.set("before", "checkpoint")
        mem.zadd("scores", {"a": 1.5, "b": float("inf")})
        agent.complete("one", agent.run_subtask("one"))
        stack.checkpointer.save_checkpoint(agent, "one")  # durable snapshot at this sequence
        mem.set("after", "the checkpoint")
        mem.rpush("log", "x", "y")
        mem.hset("h", mapping={"f": b"\x00\xff"})
        mem.delete("before")
        with pytest.raises(amber.WrongType):
            mem.rpush("after", "z")  # logged, refused by Redis: skipped on replay too
        expected = read_memory(stack.redis, stack.keys, agent.agent_id)

        _restart(redis_server)
        assert stack.redis.dbsize() == 0
        report = stack.recovery.recover_agent_state(
            agent.agent_id, agent.analysis_id, "probe_agent"
        )
        assert report.path == "postgresql_checkpoint" and report.replayed == 5
        after = read_memory(stack.redis, stack.keys, agent.agent_id)
        assert after.memory == expected.memory and after.hash == expected.hash
        assert after.seq == expected.seq


def test_l1_expiry_restores_the_secondary_and_replays(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    with _stack(engines, redis_server, tmp_path / "d") as stack:
        agent = Probe(str(uuid.uuid4()), "AAPL", stack.memory(f"wal-{uuid.uuid4().hex[:6]}"))
        agent.l1_cache.set("a", 1)
        stack.checkpointer.save_checkpoint(agent, None)
        agent.l1_cache.set("b", 2)
        expected = read_memory(stack.redis, stack.keys, agent.agent_id)
        k = stack.keys
        stack.redis.delete(
            agent.l1_cache.key("a"),
            agent.l1_cache.key("b"),
            k.l1_index(agent.agent_id),
            k.l1_seq(agent.agent_id),
        )
        report = stack.recovery.recover_agent_state(
            agent.agent_id, agent.analysis_id, "probe_agent"
        )
        assert report.path == "redis_secondary" and report.replayed == 1
        assert read_memory(stack.redis, k, agent.agent_id).hash == expected.hash


CHILD = """
import sys, amber
redis_url, pg_url, data_dir, prefix, agent_id, analysis_id = sys.argv[1:7]
with amber.connect(redis_url, pg_url, data_dir, prefix, durability="wal", wal_fsync="always") as st:
    mem = st.memory(agent_id)
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        mem.hset("counter", "n", i)
        mem.rpush("trail", i)
        print(i, flush=True)
"""


def test_killed_writer_then_redis_restart_loses_nothing_acknowledged(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    data_dir = tmp_path / "d"
    analysis_id = str(uuid.uuid4())
    src = str(Path(__file__).resolve().parents[2] / "src")
    for round_ in range(3):
        agent_id = f"wal-{uuid.uuid4().hex[:6]}"
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                redis_server.url,
                engines.database_url,
                str(data_dir),
                engines.prefix,
                agent_id,
                analysis_id,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=src),
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        # killed once it acknowledged a write (a loaded machine may take long for the
        # first), then at a later moment each round
        first = child.stdout.readline().strip()
        assert first, "the child ended before acknowledging a write"
        time.sleep(0.02 + 0.1 * round_)
        os.kill(child.pid, signal.SIGKILL)
        acked = [int(first), *(int(line) for line in child.stdout.read().split())]
        child.wait()
        _restart(redis_server)  # everything in Redis lost, no checkpoint ever taken
        with _stack(engines, redis_server, data_dir) as stack:
            report = stack.recovery.recover_agent_state(agent_id, analysis_id, "probe_agent")
            mem = stack.memory(agent_id)
            trail = [int(x) for x in mem.lrange("trail", 0, -1)]
            # every acknowledged write is there; at most the one in flight beyond it
            assert trail[: len(acked)] == acked and len(trail) <= len(acked) + 1
            assert int(mem.hget("counter", "n") or 0) >= acked[-1]
            assert report.path == "empty" and report.replayed >= 2 * len(acked)


def test_compaction_keeps_the_log_since_the_third_newest_snapshot(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    with _stack(engines, redis_server, tmp_path / "d") as stack:
        assert stack.l1_journal is not None
        agent = Probe(str(uuid.uuid4()), "AAPL", stack.memory(f"wal-{uuid.uuid4().hex[:6]}"))
        log = stack.l1_journal.log(agent.agent_id)
        log._segment_entries = 5  # small segments for the test
        seqs = []
        for i in range(5):
            for j in range(7):
                agent.l1_cache.set(f"k{j}", i)
            stack.checkpointer.save_checkpoint(agent, None)
            seqs.append(agent.l1_cache.sequence())
        # snapshots at seqs[-1], seqs[-2], seqs[-3] may be restored: the log after seqs[-3] stays
        assert log.first_seq <= seqs[-3] + 1
        assert [e.seq for e in log.entries_after(seqs[-3])] == list(
            range(seqs[-3] + 1, seqs[-1] + 1)
        )
        assert log.first_seq > 1  # older segments went


def test_coordinator_in_wal_mode(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    with _stack(engines, redis_server, tmp_path / "d") as stack:
        co = stack.coordinator.using(MarketDataClient())
        aid = co.start_analysis("AAPL", ANALYSTS)
        results = co.run(aid)
        assert all(r.status == "completed" for r in results.values())
        assert co.market.duplicate_calls == 0


def test_a_lost_log_never_makes_the_sequence_run_backwards(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    import shutil

    agent_id = f"wal-{uuid.uuid4().hex[:6]}"
    with _stack(engines, redis_server, tmp_path / "d") as stack:
        mem = stack.memory(agent_id)
        for i in range(50):
            mem.set(f"k{i}", i)
        stack.snapshotter.snapshot_on_checkpoint(agent_id)
    shutil.rmtree(tmp_path / "d" / "wal")  # the log is gone (a new host, say)
    with _stack(engines, redis_server, tmp_path / "d") as stack:
        mem = stack.memory(agent_id)
        for i in range(20):
            mem.set(f"new{i}", i)
        assert mem.sequence() == 70
        report = stack.recovery.recover_agent_state(agent_id, uuid.uuid4(), "probe_agent")
        assert report.path == "l1_existing" and mem.get("new0") == b"0"


def test_reading_a_wal_agent_needs_no_log(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    agent_id = f"wal-{uuid.uuid4().hex[:6]}"
    with (
        _stack(engines, redis_server, tmp_path / "d") as writer,
        _stack(engines, redis_server, tmp_path / "d") as reader,
    ):
        writer.memory(agent_id).set("a", 1)  # the writer holds the agent's log
        assert reader.memory(agent_id).get("a") == b"1"
        assert reader.snapshotter.take(agent_id).memory["a"].value == b"1"


def test_commands_of_20000_arguments_and_memories_of_20000_keys_replay(
    engines: Engines, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    # Lua's unpack() fails past ~8,000 arguments; a write that failed *after* it was
    # logged would make the log unreplayable. Writes are chunked inside one script now.
    n = 20_000
    with _stack(engines, redis_server, tmp_path / "d", fsync="off") as stack:
        agent = Probe(str(uuid.uuid4()), "AAPL", stack.memory(f"wal-{uuid.uuid4().hex[:6]}"))
        mem = agent.l1_cache
        agent.complete("one", agent.run_subtask("one"))
        stack.checkpointer.save_checkpoint(agent, "one")
        assert mem.rpush("big_list", *range(n)) == n
        assert mem.lpush("big_list", *range(n)) == 2 * n
        assert mem.hset("big_hash", mapping={f"f{i}": i for i in range(n)}) == n
        assert mem.sadd("big_set", *range(n)) == n
        assert mem.zadd("big_zset", {f"m{i}": float(i) for i in range(n)}) == n
        assert mem.srem("big_set", *range(0, n, 2)) == n // 2
        assert mem.hdel("big_hash", *(f"f{i}" for i in range(n))) == n
        for i in range(n):  # a memory of 20,000 keys, each write logged
            mem.set(f"k:{i}", i)
        expected = read_memory(stack.redis, stack.keys, agent.agent_id)
        assert len(expected.memory) == n + 4  # with the probe's own "log"
        assert mem.lrange("big_list", 0, 2) == [b"19999", b"19998", b"19997"]

        _restart(redis_server)
        report = stack.recovery.recover_agent_state(
            agent.agent_id, agent.analysis_id, "probe_agent"
        )
        assert report.replayed == 7 + n
        after = read_memory(stack.redis, stack.keys, agent.agent_id)
        assert after.hash == expected.hash and after.seq == expected.seq
        # and the whole memory snapshots and restores as one
        agent.complete("two", agent.run_subtask("two"))
        stack.checkpointer.save_checkpoint(agent, "two", dual_write=True)
        after = read_memory(stack.redis, stack.keys, agent.agent_id)
        _restart(redis_server)
        report = stack.recovery.recover_agent_state(
            agent.agent_id, agent.analysis_id, "probe_agent"
        )
        assert report.path == "postgresql_checkpoint" and report.replayed == 0
        assert read_memory(stack.redis, stack.keys, agent.agent_id).hash == after.hash
