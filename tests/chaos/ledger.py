"""The chaos ledger: one line per event, appended by every process of a run.

A line is ``<kind> <pid> <field> ...`` where ``pid`` is the writer's. Children
append ``go``, ``phase``, ``start``, ``call``, ``cachekill``, ``end`` and
``error``; the engine appends ``round``, ``kill``, ``exit`` and ``fault``. Each
line is one ``os.write`` on a file opened with O_APPEND: after a SIGKILL a line is
whole or absent, and lines of different processes never interleave, so the file
order is the order in which things happened.

Everything below ``Ledger`` is pure: the invariants are computed from the lines,
and from the checkpoint rows for re-executions, nothing else.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GO = "go"  # child: <action> <mode>, when it starts work
PHASE = "phase"  # child: run | resume | pause, right before the call that does it
START = (
    "start"  # child: <analysis_id> <agent_type> <subtask> <checkpoint_seq> <runner> <time> <thread>
)
CALL = "call"  # child: <call key> <thread>, before the market serves the call
CACHEKILL = "cachekill"  # child: right before it SIGKILLs itself after a PostgreSQL commit
END = "end"  # child: <action> <outcome>, when the work returned
ERROR = "error"  # child: <exception type> <message>, when the work raised
ROUND = "round"  # engine: <number> <kind>
KILL = "kill"  # engine: <child pid> <reason>, right before it sends SIGKILL
EXIT = "exit"  # engine: <child pid> <return code>, once the child is reaped
FAULT = "fault"  # engine: redis-flush | redis-restart, <time>

PHASES = ("subtask", "commit", "pause", "recovery", "other")
"""Where a kill landed: see ``kill_phases``."""

_SPACE = re.compile(r"\s+")


def _field(value: object) -> str:
    text = _SPACE.sub("_", str(value))
    return text or "-"


def format_line(kind: str, pid: int, *fields: object) -> bytes:
    """One ledger line; whitespace inside a field becomes ``_`` so fields split cleanly."""
    return (" ".join([kind, str(pid), *(_field(f) for f in fields)]) + "\n").encode()


class Ledger:
    """Appends lines to one ledger file; safe to use from several processes at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.pid = os.getpid()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, *fields: object) -> None:
        """Append one line in a single write(2)."""
        os.write(self._fd, format_line(kind, self.pid, *fields))

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


@dataclass(frozen=True)
class Entry:
    """One ledger line: its position, kind, writer and fields."""

    index: int
    kind: str
    pid: int
    fields: tuple[str, ...]


def parse(text: str) -> list[Entry]:
    """The whole lines of a ledger; an unterminated last line was never written whole."""
    lines = text.split("\n")
    lines.pop()  # "" after the final newline, or a torn tail
    entries = []
    for index, line in enumerate(lines):
        kind, pid, *fields = line.split(" ")
        entries.append(Entry(index, kind, int(pid), tuple(fields)))
    return entries


def read(path: str | Path) -> list[Entry]:
    """Parse a ledger file (empty if it does not exist yet)."""
    try:
        return parse(Path(path).read_text())
    except FileNotFoundError:
        return []


# -- re-execution of committed work -------------------------------------------------------
@dataclass(frozen=True)
class Start:
    """A subtask start: which agent, from which checkpoint, by which runner, when."""

    index: int
    pid: int
    agent_type: str
    subtask: str
    seq: int
    runner: str
    time: float
    """Wall-clock seconds (``time.time()``) just before the subtask ran."""
    thread: str = ""
    """The thread that ran it (its agent's), as its calls name it."""


@dataclass(frozen=True)
class CheckpointRow:
    """What the re-execution check needs of one committed checkpoint row."""

    agent_type: str
    seq: int
    writer: str
    completed: frozenset[str]
    time: float
    """``checkpoint_time`` in wall-clock seconds (taken by the writer, on this host)."""


def starts(entries: Iterable[Entry]) -> list[Start]:
    """Every ``start`` line."""
    found = []
    for e in entries:
        if e.kind == START:
            _, agent_type, subtask, seq, runner, at, *thread = e.fields
            found.append(
                Start(e.index, e.pid, agent_type, subtask, int(seq), runner, float(at), *thread[:1])
            )
    return found


def reexecutions(
    started: Iterable[Start],
    rows: Iterable[CheckpointRow],
    rerun: frozenset[tuple[str, str]] = frozenset(),
) -> list[Start]:
    """Starts of a subtask whose completion had already committed.

    A start of S from seq b by runner R re-executes committed work if row b itself
    already lists S, or if row b+1 of that agent lists S, was written by another
    runner, and committed before R started. One runner holds an analysis at a time,
    so another writer's rows are all older or all newer than R's starts; their
    ``checkpoint_time`` says which. (Without that test, a runner killed in S before
    its checkpoint would be blamed for the row its successor wrote after redoing S.)
    """
    by_seq = {(r.agent_type, r.seq): r for r in rows}
    found = []
    for s in started:
        if (s.agent_type, s.subtask) in rerun:  # a rollback said it runs again
            continue
        after = by_seq.get((s.agent_type, s.seq + 1))
        base = by_seq.get((s.agent_type, s.seq))
        if (base is not None and s.subtask in base.completed) or (
            after is not None
            and after.writer != s.runner
            and s.subtask in after.completed
            and after.time < s.time
        ):
            found.append(s)
    return found


# -- duplicate calls ------------------------------------------------------------------------
KILLED = "-9"
"""Return code of a child that died of SIGKILL, as the engine logs it."""


def exits(entries: Iterable[Entry]) -> dict[int, str]:
    """The logged return code of each reaped child."""
    return {int(e.fields[0]): e.fields[1] for e in entries if e.kind == EXIT}


def finished(entries: Iterable[Entry]) -> set[int]:
    """Children whose work returned (``end``): whatever happens to them afterwards is moot."""
    return {e.pid for e in entries if e.kind == END}


def killed(entries: Sequence[Entry]) -> set[int]:
    """Children that died of SIGKILL, from the engine or their own hand, in their work.

    A kill line whose child had already exited by itself (its return code says so),
    or whose work had returned, does not count.
    """
    codes = exits(entries)
    marked = {int(e.fields[0]) for e in entries if e.kind == KILL}
    marked |= {e.pid for e in entries if e.kind == CACHEKILL}
    return {pid for pid in marked if codes.get(pid, KILLED) == KILLED} - finished(entries)


def interrupted(entries: Sequence[Entry]) -> set[int]:
    """Children that did not finish their work: killed in it, or exited non-zero without end."""
    failed = {pid for pid, rc in exits(entries).items() if rc != "0"}
    return killed(entries) | (failed - finished(entries))


@dataclass(frozen=True)
class Repeat:
    """A call key made more often than the calls in flight at interruptions excuse."""

    key: str
    made: int
    excused: int
    pids: tuple[int, ...]

    @property
    def excess(self) -> int:
        """Repeats beyond the excused ones."""
        return self.made - 1 - self.excused


Committed = Callable[[str, str, float], bool]
"""(agent_type, subtask, time) → whether that subtask's checkpoint had committed by then."""


def _thread(e: Entry) -> str:
    return e.fields[1] if len(e.fields) > 1 else ""


def _losses(entries: Sequence[Entry]) -> list[tuple[int, float]]:
    """Each Redis loss the engine recorded (a ``fault`` line): its line and its time."""
    return [(e.index, float(e.fields[1])) for e in entries if e.kind == FAULT and len(e.fields) > 1]


def unexplained_rollbacks(
    entries: Sequence[Entry],
    rows: Sequence[CheckpointRow],
    rolled: Sequence[tuple[float, dict[str, Any]]],
) -> list[dict[str, Any]]:
    """The rollbacks (time, detail) that no Redis loss explains. A loss explains one when
    it was recorded (its ``fault`` line, written once the loss was complete) after the
    checkpoint before the one rolled back from was taken, and before the rollback. The
    step that made the checkpoint rolled back from may have run across the loss: its
    writes, deferred to its save, went to the Redis that had lost the memory, and its row
    (``hybrid``) does not hold them; the save finds that after the commit and writes
    Redis's copy of the memory then, so a kill around the commit leaves a checkpoint
    whose memory is nowhere, and the agent rolls back from it. A checkpoint whose
    step began after the loss put its memory in the Redis that followed, and only a later
    loss can take it. A kill alone never may."""
    losses = [t for _, t in _losses(entries)]
    taken = {(r.agent_type, r.seq): r.time for r in rows}
    out = []
    for at, detail in rolled:
        before = (detail["agent_type"], int(detail["from_checkpoint"]) - 1)
        since = taken.get(before, float("-inf"))
        if not any(since <= t <= at for t in losses):
            out.append(detail)
    return out


def lost_with_redis(
    entries: Sequence[Entry], committed: Committed, rerun: frozenset[tuple[str, str]]
) -> set[int]:
    """Calls whose responses a Redis loss may have taken, each excusing one repeat.

    A call's subtask is the last one its thread started before it. A call whose
    subtask had not committed when Redis was lost (a ``fault`` line after the
    subtask started) is excused: its cached response was in the lost memory only, or,
    made after the loss, went into a memory the recovery then replaced. So is every
    call of a subtask that a reported rollback runs again (``rerun``, the opt-in mode).
    """
    faults = _losses(entries)
    # a subtask its own thread starts again at once was cut short by a memory found lost
    # (the runner recovers it and runs the subtask again): its calls are the step in flight
    restarted: set[int] = set()
    previous: dict[tuple[int, str], Entry] = {}
    for e in entries:
        if e.kind == START and len(e.fields) > 6:
            before = previous.get((e.pid, e.fields[6]))
            if before is not None and before.fields[1:3] == e.fields[1:3]:
                restarted.add(before.index)
            previous[(e.pid, e.fields[6])] = e
    current: dict[tuple[int, str], tuple[int, tuple[str, str]]] = {}
    excused: set[int] = set()
    for e in entries:
        if e.kind == START and len(e.fields) > 6:
            current[(e.pid, e.fields[6])] = (e.index, (e.fields[1], e.fields[2]))
        elif e.kind == CALL:
            found = current.get((e.pid, _thread(e)))
            if found is None:
                continue
            began, subtask = found
            if (
                subtask in rerun
                or began in restarted
                or any(i > began and not committed(*subtask, t) for i, t in faults)
            ):
                excused.add(e.index)
    return excused


def duplicate_calls(
    entries: Sequence[Entry],
    committed: Committed | None = None,
    rerun: frozenset[tuple[str, str]] = frozenset(),
) -> tuple[int, list[Repeat]]:
    """All repeats of a call key, and those beyond what interruptions excuse.

    The last call of each thread of an interrupted child (its agents run at once, one
    per thread) may have reached the provider without its response being kept: it
    excuses one later repeat of its key. With ``committed``, so does a call whose
    subtask had not committed when Redis was lost (see :func:`lost_with_redis`).
    Every other repeat is duplicate work.
    """
    stopped = interrupted(entries)
    last_call: dict[tuple[int, str], int] = {}
    made: dict[str, list[Entry]] = {}
    for e in entries:
        if e.kind == CALL:
            last_call[(e.pid, _thread(e))] = e.index
            made.setdefault(e.fields[0], []).append(e)
    in_flight = {index for (pid, _), index in last_call.items() if pid in stopped}
    if committed is not None:
        in_flight |= lost_with_redis(entries, committed, rerun)
    total, repeats = 0, []
    for key, calls in made.items():
        total += len(calls) - 1
        excused = sum(1 for c in calls[:-1] if c.index in in_flight)
        repeat = Repeat(key, len(calls), excused, tuple(c.pid for c in calls))
        if repeat.excess > 0:
            repeats.append(repeat)
    return total, repeats


# -- where kills landed ---------------------------------------------------------------------
def kill_phases(entries: Sequence[Entry]) -> dict[int, str]:
    """For every killed child, the phase it was in (one of ``PHASES``).

    ``commit``: it killed itself between a checkpoint's PostgreSQL commit and its
    Redis write. ``pause``: it was pausing, or it was a runner and another child had
    begun a pause before the kill. ``recovery``: it was resuming and had not started
    a subtask. ``subtask``: it had started a subtask. ``other``: a run killed before
    its first subtask (connecting, building its agents).
    """
    action: dict[int, str] = {}
    went: dict[int, int] = {}  # pid -> index of its go line
    started: set[int] = set()
    self_killed: set[int] = set()
    pause_begun: list[tuple[int, int]] = []  # (index, pid) of each pause phase line
    kill_at: dict[int, int] = {}  # pid -> index of the first kill or cachekill line
    for e in entries:
        if e.kind == GO:
            action[e.pid] = e.fields[0]
            went[e.pid] = e.index
        elif e.kind == START:
            started.add(e.pid)
        elif e.kind == CACHEKILL:
            self_killed.add(e.pid)
            kill_at.setdefault(e.pid, e.index)
        elif e.kind == PHASE and e.fields[0] == "pause":
            pause_begun.append((e.index, e.pid))
        elif e.kind == KILL:
            kill_at.setdefault(int(e.fields[0]), e.index)
    died = killed(entries)
    phases: dict[int, str] = {}
    for pid, at in kill_at.items():
        if pid not in died:
            continue
        if pid in self_killed:
            phases[pid] = "commit"
            continue
        act = action.get(pid, "")
        since = went.get(pid, at)
        raced = any(other != pid and since < index < at for index, other in pause_begun)
        if act == "pause" or (raced and act in ("run", "resume")):
            phases[pid] = "pause"
        elif pid in started:
            phases[pid] = "subtask"
        elif act == "resume":
            phases[pid] = "recovery"
        else:
            phases[pid] = "other"
    return phases


def count_phases(entries: Sequence[Entry]) -> Counter[str]:
    """How many kills landed in each phase."""
    return Counter(kill_phases(entries).values())
