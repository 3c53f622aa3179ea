"""SIGKILL a real process while it appends or checkpoints: nothing acknowledged is lost."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

from amber.wal import StateStore, WriteAheadLog
from tests.chaos.helpers import kill_rounds, run_until_it_dies

pytestmark = pytest.mark.chaos

APPENDER = """
import sys
from amber.wal import WriteAheadLog
wal = WriteAheadLog(sys.argv[1], "always", segment_entries=50)
print("ready", flush=True)
while True:
    n = wal.last_seq + 1
    seq = wal.append("put", {"n": n, "pad": "x" * (n % 300)})
    print(seq, flush=True)
"""

BATCHER = """
import sys
from amber.wal import WriteAheadLog
wal = WriteAheadLog(sys.argv[1], "batch", batch_entries=50, segment_entries=400)
print("ready", flush=True)
while True:
    n = wal.last_seq + 1
    seq = wal.append("put", {"n": n})
    print(seq, flush=True)
"""

CHECKPOINTER = """
import hashlib, sys
from amber.wal import StateStore
store = StateStore(sys.argv[1], fsync="always", checkpoint_entries=15, segment_entries=40,
                   retention=0, keep_checkpoints=2)
n = len(store.state["memory"])
print("ready", flush=True)
while True:
    store.log("memory_add", {"content": [n, hashlib.sha256(str(n).encode()).hexdigest() * 30]})
    n += 1
    print(n, flush=True)
"""


def expected_block(n: int) -> list[object]:
    import hashlib

    return [n, hashlib.sha256(str(n).encode()).hexdigest() * 30]


def test_every_acknowledged_append_survives_sigkill(tmp_path: Path) -> None:
    rng = random.Random(6)
    acknowledged: set[int] = set()
    for lines in kill_rounds(APPENDER, [str(tmp_path)], 20, rng, max_delay=0.15):
        acknowledged.update(int(line) for line in lines)
        with WriteAheadLog(tmp_path, "off") as wal:
            entries = {e.seq: e for e in wal.entries_after(0)}
        assert sorted(entries) == list(range(1, len(entries) + 1))
        for seq in acknowledged:
            assert entries[seq].data == {"n": seq, "pad": "x" * (seq % 300)}
    assert len(acknowledged) > 25


def test_batch_loses_at_most_the_unwritten_batch_on_sigkill(tmp_path: Path) -> None:
    # A process crash loses only the batch still in memory (< batch_entries entries):
    # written batches are in the OS page cache even before their fsync.
    rng = random.Random(8)
    for lines in kill_rounds(BATCHER, [str(tmp_path)], 8, rng, max_delay=0.2):
        with WriteAheadLog(tmp_path, "off") as wal:
            entries = list(wal.entries_after(0))
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        assert all(e.data == {"n": e.seq} for e in entries)
        if lines:
            assert int(lines[-1]) - len(entries) < 50


def test_kills_during_checkpoints_recover_a_state_that_existed(tmp_path: Path) -> None:
    rng = random.Random(7)
    last_acknowledged = 0
    for lines in kill_rounds(CHECKPOINTER, [str(tmp_path)], 16, rng, max_delay=0.25):
        if lines:
            last_acknowledged = int(lines[-1])
        store = StateStore(tmp_path, segment_entries=40, retention=0)
        memory = store.state["memory"]
        store.wal.close()  # no checkpoint on close: leave the directory as the crash left it
        # every state logged is [block(0) .. block(m-1)]; m is at least what was acknowledged
        assert last_acknowledged <= len(memory) <= last_acknowledged + 1
        assert memory == [expected_block(i) for i in range(len(memory))]
        last_acknowledged = len(memory)
    assert last_acknowledged > 15


KILL_INSIDE_CHECKPOINT = """
import os, signal, sys
import amber.wal.files as files
from amber.wal import StateStore

step = sys.argv[2]
store = StateStore(sys.argv[1], fsync="always")
for i in range(40):
    store.log("memory_add", {"content": i})
    if i == 19:
        store.checkpoint()

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

real_write_all = files.write_all
def half_then_die(fd, data, what):
    real_write_all(fd, bytes(data[: len(data) // 2]), what)
    die()

if step == "write":
    files.write_all = half_then_die
elif step == "rename":
    files.os.replace = die
elif step == "dirsync":
    real_replace = files.os.replace
    def replace_then_die(src, dst):
        real_replace(src, dst)
        die()
    files.os.replace = replace_then_die
print("ready", flush=True)
store.checkpoint()
"""


@pytest.mark.parametrize("step", ["write", "rename", "dirsync"])
def test_kill_at_each_step_of_a_checkpoint_write(tmp_path: Path, step: str) -> None:
    assert run_until_it_dies(KILL_INSIDE_CHECKPOINT, [str(tmp_path), step]) == -signal.SIGKILL
    store = StateStore(tmp_path)
    assert store.state["memory"] == list(range(40))
    expected_checkpoint_seq = 40 if step == "dirsync" else 20
    assert store.last_recovery.checkpoint_seq == expected_checkpoint_seq
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))  # leftovers cleaned
    store.wal.close()
