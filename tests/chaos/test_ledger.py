"""The chaos ledger on synthetic lines: parsing, duplicate calls, re-executions, kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.chaos.ledger import (
    PHASES,
    CheckpointRow,
    Entry,
    Ledger,
    count_phases,
    duplicate_calls,
    format_line,
    interrupted,
    kill_phases,
    parse,
    read,
    reexecutions,
    starts,
    unexplained_rollbacks,
)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

ENGINE = 100
AID = "6f1c0b0e-0000-4000-8000-000000000001"


def ledger(*lines: str) -> list[Entry]:
    return parse("".join(line + "\n" for line in lines))


# -- the file ---------------------------------------------------------------------------------
def test_lines_round_trip_and_whitespace_never_splits_a_field() -> None:
    line = format_line("error", 42, "StoreUnavailable", "Redis failed:\n  reset by peer")
    assert line == b"error 42 StoreUnavailable Redis_failed:_reset_by_peer\n"
    (entry,) = parse(line.decode())
    assert entry == Entry(0, "error", 42, ("StoreUnavailable", "Redis_failed:_reset_by_peer"))
    assert format_line("end", 1, "") == b"end 1 -\n"


def test_a_torn_last_line_is_not_read() -> None:
    entries = parse("call 1 a:b:x=1\ncall 1 a:b:x=2\ncall 1 a:b:")
    assert [e.fields for e in entries] == [("a:b:x=1",), ("a:b:x=2",)]
    assert parse("") == []


def test_read_of_a_missing_ledger_is_empty(tmp_path: Path) -> None:
    assert read(tmp_path / "none.log") == []


WRITER = """
import sys
from tests.chaos.ledger import Ledger
ledger = Ledger(sys.argv[1])
for i in range(int(sys.argv[2])):
    ledger.write("call", f"p:e:i={i}", "x" * (i % 200))
if sys.argv[3] == "kill":
    import os, signal
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_processes_appending_at_once_never_interleave_and_a_kill_loses_no_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(ROOT)]))
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), "2000", end], cwd=ROOT, env=env)
        for end in ("kill", "exit", "kill")
    ]
    codes = [p.wait(60) for p in procs]
    assert codes == [-signal.SIGKILL, 0, -signal.SIGKILL]
    entries = read(path)
    assert len(entries) == 6000
    for p in procs:
        mine = [e for e in entries if e.pid == p.pid]
        assert [e.fields[0] for e in mine] == [f"p:e:i={i}" for i in range(2000)]
        assert all(e.fields[1] == "x" * (i % 200) or i % 200 == 0 for i, e in enumerate(mine))


def test_ledger_writes_carry_the_writer_pid(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.log")
    led.write("phase", "run")
    led.close()
    assert read(tmp_path / "l.log") == [Entry(0, "phase", os.getpid(), ("run",))]


# -- duplicate calls --------------------------------------------------------------------------
def test_no_repeat_no_duplicate() -> None:
    entries = ledger("call 1 a", "call 1 b", f"exit {ENGINE} 1 0")
    assert duplicate_calls(entries) == (0, [])


def test_the_call_in_flight_at_a_kill_excuses_one_repeat() -> None:
    entries = ledger(
        "call 1 a",
        "call 1 b",  # in flight when 1 was killed: its response may be lost
        f"kill {ENGINE} 1 delay",
        f"exit {ENGINE} 1 -9",
        "call 2 b",
        "call 2 c",
        f"exit {ENGINE} 2 0",
    )
    total, repeats = duplicate_calls(entries)
    assert (total, repeats) == (1, [])


def test_each_thread_of_a_killed_child_has_its_own_call_in_flight() -> None:
    entries = ledger(
        "call 1 a t1",  # agent 1's call, in flight: its response not yet kept ...
        "call 1 b t2",  # ... while agent 2, on another thread, went on calling
        "call 1 c t2",
        f"kill {ENGINE} 1 delay",
        f"exit {ENGINE} 1 -9",
        "call 2 a t3",
        "call 2 c t4",
        "call 2 b t4",  # agent 2's b had been answered and kept before its c
        f"exit {ENGINE} 2 0",
    )
    _, repeats = duplicate_calls(entries)
    assert [(r.key, r.excused, r.excess) for r in repeats] == [("b", 0, 1)]


def test_a_repeat_of_an_earlier_call_of_a_killed_child_is_duplicate_work() -> None:
    entries = ledger(
        "call 1 a",  # answered and kept before the next call: never to be made again
        "call 1 b",
        f"kill {ENGINE} 1 delay",
        f"exit {ENGINE} 1 -9",
        "call 2 a",
        "call 2 b",
    )
    total, repeats = duplicate_calls(entries)
    assert total == 2
    (repeat,) = repeats
    assert (repeat.key, repeat.made, repeat.excused, repeat.excess) == ("a", 2, 0, 1)
    assert repeat.pids == (1, 2)


def test_one_kill_excuses_one_repeat_not_two() -> None:
    entries = ledger(
        "call 1 a",
        f"exit {ENGINE} 1 -9",
        "cachekill 1 1",
        "call 2 a",
        "call 3 a",
        f"exit {ENGINE} 2 0",
        f"exit {ENGINE} 3 0",
    )
    _, (repeat,) = duplicate_calls(entries)
    assert (repeat.made, repeat.excused, repeat.excess) == (3, 1, 1)


def test_each_of_several_kills_in_flight_on_the_same_call_excuses_one() -> None:
    entries = ledger(
        "call 1 a",
        f"kill {ENGINE} 1 delay",
        f"exit {ENGINE} 1 -9",
        "call 2 a",
        f"kill {ENGINE} 2 delay",
        f"exit {ENGINE} 2 -9",
        "call 3 a",
        f"exit {ENGINE} 3 0",
    )
    assert duplicate_calls(entries) == (2, [])


def test_a_child_that_raised_may_lose_its_call_in_flight() -> None:
    entries = ledger("call 1 a", "error 1 StoreUnavailable gone", f"exit {ENGINE} 1 3", "call 2 a")
    assert interrupted(entries) == {1}
    assert duplicate_calls(entries) == (1, [])


def test_a_kill_that_came_after_the_child_exited_excuses_nothing() -> None:
    entries = ledger(
        "call 1 a", f"kill {ENGINE} 1 delay", f"exit {ENGINE} 1 0", "call 2 a", f"exit {ENGINE} 2 0"
    )
    assert interrupted(entries) == set()
    _, (repeat,) = duplicate_calls(entries)
    assert repeat.excess == 1


def test_a_child_killed_after_its_work_returned_excuses_nothing() -> None:
    entries = ledger(
        "call 1 a", "end 1 run ok", f"kill {ENGINE} 1 delay", f"exit {ENGINE} 1 -9", "call 2 a"
    )
    assert interrupted(entries) == set()
    assert duplicate_calls(entries)[1][0].excess == 1


def test_a_repeat_within_one_live_child_is_duplicate_work() -> None:
    _, (repeat,) = duplicate_calls(ledger("call 1 a", "call 1 a", f"exit {ENGINE} 1 0"))
    assert repeat.excess == 1


# -- re-executions ----------------------------------------------------------------------------
def start(pid: int, agent: str, subtask: str, seq: int, runner: str, at: float = 0.0) -> str:
    return f"start {pid} {AID} {agent} {subtask} {seq} {runner} {at:.6f}"


# r1 ran at t=10..19, r2 at t=20..29
ROWS = [
    CheckpointRow("fin", 1, "r1", frozenset({"parse"}), 11.0),
    CheckpointRow("fin", 2, "r1", frozenset({"parse", "ratios"}), 12.0),
    CheckpointRow("fin", 3, "r2", frozenset({"parse", "ratios", "peers"}), 21.0),
]


def test_starts_are_parsed() -> None:
    (s,) = starts(ledger(start(7, "fin", "peers", 2, "r2", 20.5)))
    assert (s.pid, s.agent_type, s.subtask, s.seq, s.runner) == (7, "fin", "peers", 2, "r2")
    assert s.time == 20.5


def test_continuing_from_the_latest_checkpoint_is_no_reexecution() -> None:
    entries = ledger(
        start(1, "fin", "parse", 0, "r1", 10.0),
        start(1, "fin", "ratios", 1, "r1", 11.5),
        start(2, "fin", "peers", 2, "r2", 20.0),  # r2 wrote seq 3 itself, after this start
        start(2, "fin", "flags", 3, "r2", 21.5),
    )
    assert reexecutions(starts(entries), ROWS) == []


def test_redoing_the_subtask_a_killed_runner_never_committed_is_no_reexecution() -> None:
    # r1 is killed in 'peers' (from seq 2) before its checkpoint; r2 redoes it and
    # commits seq 3 listing 'peers': r1's start came first, so r1 re-executed nothing
    entries = ledger(
        start(1, "fin", "peers", 2, "r1", 12.5), start(2, "fin", "peers", 2, "r2", 20.0)
    )
    assert reexecutions(starts(entries), ROWS) == []


def test_starting_from_a_stale_seq_whose_successor_committed_earlier_is_reexecution() -> None:
    # r3 (t=30) continues from seq 2 although r2 had committed seq 3 with 'peers' done
    found = reexecutions(starts(ledger(start(3, "fin", "peers", 2, "r3", 30.0))), ROWS)
    assert [(s.runner, s.seq) for s in found] == [("r3", 2)]


def test_a_checkpoint_committed_just_before_a_kill_must_not_be_redone() -> None:
    # r1 committed seq 2 ('ratios' done) and died before the Redis write; r2 restarts
    # 'ratios' from seq 1: the committed row wins, so this is duplicate work
    found = reexecutions(starts(ledger(start(2, "fin", "ratios", 1, "r2", 20.0))), ROWS)
    assert [s.subtask for s in found] == ["ratios"]


def test_starting_a_subtask_the_base_checkpoint_lists_as_done_is_reexecution() -> None:
    found = reexecutions(starts(ledger(start(3, "fin", "parse", 3, "r3", 30.0))), ROWS)
    assert [s.subtask for s in found] == ["parse"]


def test_another_agents_rows_are_not_judged() -> None:
    entries = ledger(start(3, "val", "parse", 3, "r3", 30.0))
    assert reexecutions(starts(entries), ROWS) == []


# -- where kills landed -----------------------------------------------------------------------
def test_kill_phases() -> None:
    entries = ledger(
        f"round {ENGINE} 1 kill",
        "go 1 run wal",
        "phase 1 run",
        start(1, "fin", "parse", 0, "r1"),
        f"kill {ENGINE} 1 delay",
        f"exit {ENGINE} 1 -9",
        f"round {ENGINE} 2 commit",
        "go 2 resume wal",
        "phase 2 resume",
        start(2, "fin", "parse", 0, "r2"),
        "cachekill 2 1",
        f"exit {ENGINE} 2 -9",
        f"round {ENGINE} 3 pause",
        "go 3 resume wal",
        "phase 3 resume",
        start(3, "fin", "ratios", 1, "r3"),
        "go 4 pause wal",
        "phase 4 pause",
        f"kill {ENGINE} 3 pause-race",  # the runner, killed after the pause began
        f"kill {ENGINE} 4 pausing",
        f"exit {ENGINE} 3 -9",
        f"exit {ENGINE} 4 -9",
        "go 5 resume wal",
        "phase 5 resume",
        f"kill {ENGINE} 5 delay",  # still recovering: no subtask started
        f"exit {ENGINE} 5 -9",
        f"round {ENGINE} 4 kill",
        "go 6 resume wal",
        start(6, "fin", "ratios", 1, "r6"),  # the pause of round 3 is not this one's race
        f"kill {ENGINE} 6 delay",
        f"exit {ENGINE} 6 -9",
        "go 7 run hybrid",
        f"kill {ENGINE} 7 delay",
        f"exit {ENGINE} 7 -9",
        "go 8 run hybrid",
        f"kill {ENGINE} 8 delay",  # too late: it had exited by itself
        f"exit {ENGINE} 8 0",
        "go 9 run hybrid",
        "end 9 run ok",
        f"kill {ENGINE} 9 delay",  # its work had returned: killed while closing
        f"exit {ENGINE} 9 -9",
    )
    assert kill_phases(entries) == {
        1: "subtask",
        2: "commit",
        3: "pause",
        4: "pause",
        5: "recovery",
        6: "subtask",
        7: "other",
    }
    assert set(count_phases(entries)) <= set(PHASES)


# -- Redis losses -----------------------------------------------------------------------------
def _committed(agent: str, subtask: str, at: float) -> bool:
    return any(r.agent_type == agent and subtask in r.completed and r.time <= at for r in ROWS)


def _with_thread(line: str, thread: str = "t1") -> str:
    return f"{line} {thread}"


def test_a_call_of_a_subtask_uncommitted_at_a_redis_loss_is_excused() -> None:
    entries = ledger(
        _with_thread(start(1, "fin", "peers", 2, "r2", 20.0)),
        "call 1 a t1",
        f"fault {ENGINE} redis-flush 20.5",  # peers commits at 21.0: not yet
        f"exit {ENGINE} 1 0",
        "call 2 a t1",
    )
    assert duplicate_calls(entries, _committed) == (1, [])
    _, (repeat,) = duplicate_calls(entries)  # without the rule: a duplicate
    assert repeat.excess == 1


def test_a_call_of_a_subtask_committed_before_the_loss_is_a_duplicate() -> None:
    entries = ledger(
        _with_thread(start(1, "fin", "parse", 0, "r1", 10.0)),
        "call 1 a t1",
        f"fault {ENGINE} redis-flush 11.5",  # parse committed at 11.0: its memory is stored
        f"exit {ENGINE} 1 0",
        "call 2 a t1",
    )
    _, (repeat,) = duplicate_calls(entries, _committed)
    assert repeat.excess == 1


def test_a_subtask_restarted_by_its_own_thread_excuses_its_calls() -> None:
    entries = ledger(
        _with_thread(start(1, "fin", "peers", 2, "r2", 20.0)),
        "call 1 a t1",
        _with_thread(start(1, "fin", "peers", 2, "r2", 20.1)),  # memory lost: run again
        "call 1 a t1",
        f"exit {ENGINE} 1 0",
    )
    assert duplicate_calls(entries, _committed) == (1, [])


def test_a_reported_rollback_excuses_the_calls_of_what_it_runs_again() -> None:
    entries = ledger(
        _with_thread(start(1, "fin", "parse", 0, "r1", 10.0)),
        "call 1 a t1",
        f"exit {ENGINE} 1 0",
        "call 2 a t1",
    )
    assert duplicate_calls(entries, _committed, frozenset({("fin", "parse")})) == (1, [])


def test_a_rollback_is_explained_only_by_a_redis_loss_during_or_after_its_step() -> None:
    def rollback(from_checkpoint: int) -> dict[str, object]:
        return {"agent_type": "fin", "from_checkpoint": from_checkpoint, "to_checkpoint": 1}

    # checkpoints 1, 2, 3 taken at 11.0, 12.0, 21.0; Redis lost at 15.0
    entries = ledger(f"fault {ENGINE} redis-flush 15.0")
    two, three = rollback(2), rollback(3)
    assert unexplained_rollbacks(entries, ROWS, [(16.0, two)]) == []
    # the step of checkpoint 3 began at 12.0 and ran across the loss: its deferred writes
    # went to the Redis that had lost the memory
    assert unexplained_rollbacks(entries, ROWS, [(22.0, three)]) == []
    assert unexplained_rollbacks(entries, ROWS, [(14.0, two)]) == [two]  # before the loss
    assert unexplained_rollbacks(ledger(), ROWS, [(16.0, two)]) == [two]
    # lost before checkpoint 2 was taken: 3's step wrote into the Redis that followed
    earlier = ledger(f"fault {ENGINE} redis-flush 11.5")
    assert unexplained_rollbacks(earlier, ROWS, [(22.0, three)]) == [three]  # a kill's
