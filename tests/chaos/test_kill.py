"""SIGKILL a real process while it appends or checkpoints: nothing acknowledged is lost."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from amber.wal import StateStore, WriteAheadLog
from tests.chaos.helpers import run_and_kill

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
    for _ in range(25):
        lines = run_and_kill(APPENDER, [str(tmp_path)], rng, max_delay=0.15)
        acknowledged.update(int(line) for line in lines)
        with WriteAheadLog(tmp_path, "off") as wal:
            entries = {e.seq: e for e in wal.entries_after(0)}
        assert sorted(entries) == list(range(1, len(entries) + 1))
        for seq in acknowledged:
            assert entries[seq].data == {"n": seq, "pad": "x" * (seq % 300)}
    assert len(acknowledged) > 25


def test_kills_during_checkpoints_recover_a_state_that_existed(tmp_path: Path) -> None:
    rng = random.Random(7)
    last_acknowledged = 0
    for _ in range(20):
        lines = run_and_kill(CHECKPOINTER, [str(tmp_path)], rng, max_delay=0.25)
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
