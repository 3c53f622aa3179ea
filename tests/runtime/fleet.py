"""Worker processes of ``tests.runtime.workapp`` and the audit of what they did.

``Fleet`` starts ``amber worker`` processes (the real command line) for one app tag and
kills, stops or restarts them; ``audit`` reads the ledger, the analyses, their results,
timelines and checkpoints and lists every broken promise:

* an analysis not completed, or whose result differs from an uninterrupted run's;
* a step started again after the start whose result was recorded (a completed step run
  twice);
* a step started more than once where the earlier start was not in a process that died
  (only the step in flight at a SIGKILL may run again);
* an analysis whose checkpoints were written by two runs at once (a run's checkpoints
  interleaved with another's), or by a run that never claimed it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import amber
from amber.runtime.worker import name_in_banner
from tests.chaos.helpers import SRC
from tests.runtime import workapp

ROOT = str(Path(SRC).parent)
APP = "tests.runtime.workapp:app"
CLI = "from amber.cli import main; main()"


def cli_env(tag: str, **settings: str) -> dict[str, str]:
    """The environment of a child: the suite's servers (``AMBER_*`` of this process), the
    app tag, and ``settings`` as ``AMBER_<NAME>`` variables."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, ROOT]))
    env[workapp.TAG_VARIABLE] = tag
    env.update({f"AMBER_{k.upper()}": v for k, v in settings.items()})
    return env


def run_cli(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``amber <args>`` in a child process, to its end."""
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


@dataclass
class Proc:
    """One ``amber worker`` process, its output in files."""

    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stdout(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def stderr(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def name(self) -> str | None:
        """The worker's id (``host:pid:token``), once it printed its first line."""
        return name_in_banner(self.stdout())


@dataclass
class Fleet:
    """``amber worker`` processes of one app tag, in one directory."""

    tag: str
    workdir: Path
    concurrency: int = 2
    settings: dict[str, str] = field(default_factory=dict)
    env_override: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)
    """Pids of workers killed with SIGKILL."""

    def start(self) -> Proc:
        """Start one more worker (it runs until stopped or killed)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        n = len(self.procs)
        out, err = self.workdir / f"worker{n}.out", self.workdir / f"worker{n}.err"
        env = {**cli_env(self.tag, **self.settings), **self.env_override}
        with out.open("wb") as o, err.open("wb") as e:
            popen = subprocess.Popen(
                [sys.executable, "-c", CLI, "worker", "--app", APP,
                 "--concurrency", str(self.concurrency)],
                stdout=o, stderr=e, env=env, cwd=ROOT,
            )  # fmt: skip
        proc = Proc(popen, out, err)
        self.procs.append(proc)
        return proc

    def alive(self) -> list[Proc]:
        return [p for p in self.procs if p.popen.poll() is None]

    def wait_ready(self, procs: Iterable[Proc], timeout: float = 60) -> None:
        """Wait until each worker printed its first line (it is connected and polling)."""
        for p in procs:
            wait_until(lambda p=p: p.name() is not None, timeout, f"worker {p.pid} ready", [p])

    def kill(self, proc: Proc) -> None:
        """SIGKILL a worker and reap it."""
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(timeout=30)
        self.killed.add(proc.pid)

    def terminate(self, proc: Proc, timeout: float = 60) -> int:
        """SIGTERM a worker; its exit code."""
        proc.popen.send_signal(signal.SIGTERM)
        return proc.popen.wait(timeout=timeout)

    def close(self) -> None:
        """Stop every worker still running (SIGTERM, then SIGKILL if it lingers); one a
        test left stopped (SIGSTOP) is let go on first, so it can hear the SIGTERM."""
        for p in self.alive():
            p.popen.send_signal(signal.SIGCONT)
            p.popen.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(timeout=30)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def report(self) -> str:
        """Every worker's stderr tail, for assertion messages."""
        return "\n".join(f"--- worker {p.pid}\n{p.stderr()[-2000:]}" for p in self.procs)


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    procs: Iterable[Proc] = (),
) -> None:
    """Poll ``predicate`` until true; fail if ``timeout`` passes or a process in ``procs``
    exits meanwhile."""
    watched = list(procs)
    deadline = time.monotonic() + timeout
    while not predicate():
        for p in watched:
            assert p.popen.poll() is None, f"{what}: worker {p.pid} exited\n{p.stderr()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


def submit(stack: amber.Stack, app: amber.App, n: int, ledger: Path, sleep: float) -> list[str]:
    """Queue ``n`` analyses (checkpoints preserved, so the audit can read them)."""
    doc = {"ledger": str(ledger), "sleep": sleep}
    return [app.submit(stack, workapp.DEFINITION, doc, preserve=True) for _ in range(n)]


def new_tag() -> str:
    return uuid.uuid4().hex[:10]


def statuses(stack: amber.Stack, aids: list[str]) -> dict[str, str]:
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT analysis_id::text, status FROM analyses WHERE analysis_id = ANY(%s::uuid[])",
            (aids,),
        ).fetchall()
    return {str(a): str(s) for a, s in rows}


def all_finished(stack: amber.Stack, aids: list[str]) -> Callable[[], bool]:
    def done() -> bool:
        found = statuses(stack, aids)
        return len(found) == len(aids) and all(s == "completed" for s in found.values())

    return done


@dataclass(frozen=True)
class Start:
    analysis_id: str
    agent_type: str
    step: str
    pid: int
    token: str


def starts(path: Path) -> list[Start]:
    """The ledger's start lines, in the order they were written."""
    return [
        Start(w[1], w[2], w[3], int(w[4]), w[5])
        for w in workapp.ledger(path)
        if len(w) == 6 and w[0] == "start"
    ]


@dataclass
class Audit:
    """What the workers did to a set of analyses, and every promise they broke."""

    starts: int = 0
    steps: int = 0
    """Steps recorded (one per step of every completed agent)."""
    repeats: int = 0
    """Starts of a step after its first (in flight at a kill, or a broken promise)."""
    unfinished: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    reexecuted: list[Start] = field(default_factory=list)
    """Starts after the start whose result was recorded: a completed step run again."""
    unexplained: list[Start] = field(default_factory=list)
    """Repeated starts whose earlier start was in a process that did not die."""
    overlapping: list[str] = field(default_factory=list)
    """Analyses whose checkpoints interleave two runs, or name a run that never claimed."""
    broken_chains: list[str] = field(default_factory=list)
    takeovers: int = 0
    releases: int = 0
    claims: dict[str, list[str]] = field(default_factory=dict)
    """Each analysis's claiming runs (claimed or taken_over), in order."""

    def problems(self) -> dict[str, Any]:
        """Every non-empty list of broken promises (empty: all kept)."""
        found = {
            "unfinished": self.unfinished,
            "wrong results": self.wrong,
            "completed steps re-executed": self.reexecuted,
            "unexplained repeats": self.unexplained,
            "overlapping runs": self.overlapping,
            "broken checkpoint chains": self.broken_chains,
        }
        return {k: v[:10] for k, v in found.items() if v}


def audit(
    stack: amber.Stack,
    aids: list[str],
    ledger: Path,
    died: set[int],
) -> Audit:
    """Check every analysis in ``aids`` against the ledger (``died``: pids that were
    SIGKILLed or lost a server; a repeated start is allowed only after theirs)."""
    a = Audit()
    found = statuses(stack, aids)
    a.unfinished = [aid for aid in aids if found.get(aid) != "completed"]
    recorded: dict[tuple[str, str, str], str] = {}
    for aid in aids:
        kept = stack.analyses.results(aid)
        agents = {e["agent_type"] for e in stack.analyses.get(aid).agents}
        if {r["agent_type"] for r in kept} != agents:
            a.wrong.append(aid)
            continue
        for r in kept:
            result = r["result"] or {}
            if r["status"] != "completed" or result.get("total") != workapp.expected(
                aid, r["agent_type"]
            ):
                a.wrong.append(aid)
            for i, token in enumerate(result.get("tokens") or []):
                recorded[(aid, r["agent_type"], f"s{i}")] = token
                a.steps += 1
        events = stack.analyses.timeline(aid)
        a.claims[aid] = [str(e["by"]) for e in events if e["kind"] in ("claimed", "taken_over")]
        a.takeovers += sum(1 for e in events if e["kind"] == "taken_over")
        a.releases += sum(1 for e in events if e["kind"] == "released")
    wanted = set(aids)
    by_step: dict[tuple[str, str, str], list[Start]] = defaultdict(list)
    for s in starts(ledger):
        if s.analysis_id in wanted:
            by_step[(s.analysis_id, s.agent_type, s.step)].append(s)
            a.starts += 1
    for key, seen in by_step.items():
        a.repeats += len(seen) - 1
        token = recorded.get(key)
        at = next((i for i, s in enumerate(seen) if s.token == token), None)
        if at is None:
            continue  # not recorded: the analysis is unfinished (reported above)
        a.reexecuted += seen[at + 1 :]
        a.unexplained += [s for s in seen[:at] if s.pid not in died]
    _check_writers(stack, aids, a)
    return a


def _check_writers(stack: amber.Stack, aids: list[str], a: Audit) -> None:
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT analysis_id::text, agent_type, seq, writer FROM agent_checkpoints"
            " WHERE analysis_id = ANY(%s::uuid[]) ORDER BY id",
            (aids,),
        ).fetchall()
    writers: dict[str, list[str]] = defaultdict(list)
    seqs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for aid, agent_type, seq, writer in rows:
        writers[aid].append(str(writer))
        seqs[(aid, agent_type)].append(int(seq))
    for aid, order in writers.items():
        blocks = [w for i, w in enumerate(order) if i == 0 or order[i - 1] != w]
        claimed = set(a.claims.get(aid, []))
        if len(blocks) != len(set(blocks)) or not set(blocks) <= claimed:
            a.overlapping.append(aid)
    for (aid, _), chain in seqs.items():
        if sorted(chain) != list(range(1, len(chain) + 1)):
            a.broken_chains.append(aid)


def next_claim(events: list[dict[str, Any]], worker: str) -> dict[str, Any] | None:
    """The first claim (``claimed`` or ``taken_over``) after the last one by a run of
    ``worker`` (a worker's id), or None if no run claimed the analysis after it."""
    claims = [e for e in events if e["kind"] in ("claimed", "taken_over")]
    mine = [i for i, e in enumerate(claims) if str(e["by"]).startswith(f"{worker}:")]
    if not mine or mine[-1] + 1 >= len(claims):
        return None
    return claims[mine[-1] + 1]


def taken_over_from(event: dict[str, Any] | None, worker: str) -> bool:
    """Whether ``event`` is a takeover from a run of ``worker``."""
    return (
        event is not None
        and event["kind"] == "taken_over"
        and str((event["detail"] or {}).get("taken_over_from", "")).startswith(f"{worker}:")
    )
