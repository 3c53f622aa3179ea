"""The chaos engine: real analyses in real processes, killed and starved of Redis at random.

    python -m tests.chaos.rounds --rounds 1000 [--seed S]

Analyses of the three analysts on AAPL run one after another, each in a
durability mode drawn at random (hybrid, checkpoint, wal). A round applies one
fault to the analysis in progress, in fresh child processes:

* ``kill``     the child running (or resuming) it is SIGKILLed after a random delay;
* ``commit``   the child kills itself at its n-th checkpoint, right after the
               PostgreSQL commit, or once the insert went out but before the Redis
               copies did (the commit may land or not);
* ``flush``    the run's Redis keys are deleted while the child runs (every mode);
* ``restart``  Redis is restarted, empty, while the child runs (every mode);
* ``pause``    another child pauses the analysis while the runner works, either
               may be killed meanwhile, then a fresh child resumes it (and may be
               killed in turn).

After every round the invariants are checked from the ledgers and PostgreSQL
(``docs/reliability.md`` says how): a repeated call is a duplicate unless it
repeats the call in flight at a kill, or one made by a subtask that had not
committed when Redis was lost, or one of a subtask that a reported rollback ran
again (``hybrid`` only, after a Redis loss that can have taken the memory it went
back from: the other modes, and a kill, must never roll back). A completed analysis
is compared with an uninterrupted run in its mode, and the next round starts a new
one. At the end the analysis in progress is resumed once more, without faults, and
must complete. Every choice the engine makes comes from the seed, so a failing run
can be replayed with its seed (process timing still varies from run to run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import amber
from amber.examples import ANALYSTS
from tests.chaos.ledger import (
    CALL,
    EXIT,
    FAULT,
    KILL,
    ROUND,
    CheckpointRow,
    Ledger,
    count_phases,
    duplicate_calls,
    reexecutions,
    starts,
    unexplained_rollbacks,
)
from tests.chaos.ledger import read as read_ledger
from tests.chaos.procs import Child, Pool
from tests.chaos.report import AnalysisCounts, Tally
from tests.chaos.servers import ChaosPostgres, ChaosRedis
from tests.chaos.worker import TICKER, Order

MODES = ("hybrid", "checkpoint", "wal")
MODE_WEIGHTS = (3, 4, 3)
"""checkpoint, the default, gets a little more."""

KINDS = {"kill": 30, "commit": 25, "pause": 25, "flush": 10, "restart": 10}
"""Relative weights of the round kinds."""

REDIS_KINDS = ("flush", "restart")
AGENT_TYPES = tuple(cls.agent_type for cls in ANALYSTS)
FINISHED = ("completed", "failed", "expired")

READY_TIMEOUT = 60.0
"""Seconds a child may take to connect."""
REAP_TIMEOUT = 30.0
"""Seconds a child may run after ``go``; one analysis takes well under one."""
FINAL_TIMEOUT = 120.0
RUNNER_GRACE = 5.0
"""Seconds for PostgreSQL to drop a dead child's runner lock."""
POOL_SIZE = 3


def choose_mode(seed: int, k: int, modes: tuple[str, ...] = MODES) -> str:
    """Durability mode of the run's k-th analysis (0-based)."""
    weights = [MODE_WEIGHTS[MODES.index(m)] for m in modes]
    return random.Random(f"{seed}:analysis:{k}").choices(modes, weights)[0]


def round_rng(seed: int, n: int) -> random.Random:
    """Round n's own random stream: its choices do not depend on earlier rounds' draws."""
    return random.Random(f"{seed}:round:{n}")


def possible_kinds(mode: str, can_restart: bool) -> dict[str, int]:
    """The round kinds open to an analysis in ``mode``, with their weights: Redis losses
    in every mode; restarts only on the engine's own Redis."""
    return {k: w for k, w in KINDS.items() if k != "restart" or can_restart}


def choose_kind(rng: random.Random, mode: str, can_restart: bool) -> str:
    """The fault of one round."""
    kinds = possible_kinds(mode, can_restart)
    return rng.choices(list(kinds), list(kinds.values()))[0]


class RoundAborted(RuntimeError):
    """A child could not even start its work; the round is recorded as failed."""


@dataclass(frozen=True)
class Options:
    """How to run."""

    rounds: int = 1000
    seed: int | None = None
    redis_url: str | None = None
    """None: the engine's own embedded Redis (the only kind it can restart)."""
    database_url: str | None = None
    """None: an embedded PostgreSQL for the run."""
    workdir: Path | None = None
    """Ledgers, children's stderr, WAL logs; None: a temporary directory."""
    keep: bool = False
    """Keep the workdir and the run's rows even when every invariant held."""
    max_delay: float = 0.3
    """Upper bound of the random delays, seconds."""
    modes: tuple[str, ...] = MODES
    """Durability modes drawn for the analyses."""
    progress_every: int = 0
    """Print a progress line every n rounds (0: ten times per run)."""


@dataclass
class Analysis:
    """One analysis of the run."""

    aid: str
    mode: str
    ledger_path: Path
    ledger: Ledger
    steps: int = 0
    """Runner children sent to work on it so far (0: it was never run)."""
    reported: dict[str, int] = field(default_factory=dict)
    """Call key -> excess repeats already reported as failures."""
    unexplained: int = 0
    """Rollbacks no Redis loss explains, already reported as failures."""


@dataclass
class Engine:
    """One chaos run; ``run()`` returns its tally."""

    opts: Options
    out: TextIO | None = None
    """Where the seed, progress and table go (None: sys.stdout at the time of writing)."""
    seed: int = 0
    tally: Tally = field(init=False)
    current: Analysis | None = None
    started: list[str] = field(default_factory=list)
    references: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.seed = self.opts.seed if self.opts.seed is not None else secrets.randbits(32)
        self.tally = Tally(self.seed, self.opts.rounds)
        self.tally.replay_args = self._replay_args()
        self.prefix = f"chaos-{uuid.uuid4().hex[:10]}"
        self.where = "uninterrupted runs"
        """The part of the run in progress, for failure messages."""
        self._live: list[Child] = []
        """Children of the round in progress not reaped yet."""

    def _replay_args(self) -> str:
        """Options beyond --rounds and --seed that change what the rounds do."""
        args = []
        if self.opts.modes != MODES:
            args.append("--modes " + ",".join(self.opts.modes))
        if self.opts.max_delay != Options.max_delay:
            args.append(f"--max-delay {self.opts.max_delay}")
        return " ".join(args)

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> Tally:
        """Set up, run the reference runs and the rounds, tear down."""
        extra = f" ({self.tally.replay_args})" if self.tally.replay_args else ""
        self._say(f"chaos: {self.opts.rounds} rounds, seed {self.seed}{extra}")
        t0 = time.monotonic()
        self.own_workdir = self.opts.workdir is None
        self.workdir = Path(self.opts.workdir or tempfile.mkdtemp(prefix="amber-chaos-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "ledgers").mkdir(exist_ok=True)
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(self._remove_workdir)
            self._setup(cleanup)
            self._reference_runs()
            every = self.opts.progress_every or max(1, self.opts.rounds // 10)
            for n in range(1, self.opts.rounds + 1):
                self._round(n)
                if n % every == 0 and n < self.opts.rounds:
                    self._say(
                        f"round {n}/{self.opts.rounds}: {self.tally.completed} analyses"
                        f" completed, {len(self.tally.failures)} failures"
                    )
            self._finish()
            self._say(self.tally.table())
            self._say(f"took {time.monotonic() - t0:.1f} s")
        return self.tally

    def _fail(self, message: str) -> None:
        """Record a failure and say it at once, so a long run shows it while it goes on."""
        self.tally.failures.append(message)
        self._say(f"FAILURE: {message}")

    def _remove_workdir(self) -> None:
        if self.own_workdir and self._tidy():
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            self._say(f"ledgers, WAL logs and children's stderr kept in {self.workdir}")

    def _say(self, text: str) -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    def _setup(self, cleanup: contextlib.ExitStack) -> None:
        self.pg = ChaosPostgres(self.opts.database_url, self.workdir / "engines")
        cleanup.callback(self.pg.close)
        self.redis = ChaosRedis(self.opts.redis_url, self.workdir / "engines")
        cleanup.callback(lambda: self.redis.close(self.prefix, flush=self._tidy()))
        self.stack = amber.connect(
            self.redis.url, self.pg.url, self.workdir / "parent", self.prefix
        )
        cleanup.callback(self.stack.close)
        cleanup.callback(self._drop_rows)
        stderr = open(self.workdir / "children.log", "ab")  # noqa: SIM115
        cleanup.callback(stderr.close)
        self.pool = Pool(POOL_SIZE, stderr)
        cleanup.callback(self.pool.close)
        cleanup.callback(self._close_ledgers)

    def _tidy(self) -> bool:
        """Remove what the run wrote: unless asked to keep it, or something failed."""
        return self.tally.ok and not self.opts.keep

    def _drop_rows(self) -> None:
        """Delete the run's rows from a database the run did not create."""
        if self.pg.own or not self._tidy() or not self.started:
            return
        try:
            with self.stack.pg.connection() as conn:
                for table in ("agent_checkpoints", "agent_checkpoints_archive", "analyses"):
                    conn.execute(
                        f"DELETE FROM {table} WHERE analysis_id = ANY(%s::uuid[])",
                        (self.started,),
                    )
        except Exception as exc:
            self._say(f"could not delete the run's rows: {exc}")

    def _close_ledgers(self) -> None:
        if self.current is not None:
            self.current.ledger.close()
            self.current = None

    # -- analyses -------------------------------------------------------------------------------
    def _new_analysis(self, mode: str | None = None, name: str | None = None) -> Analysis:
        if mode is None:
            mode = choose_mode(self.seed, len(self.tally.analyses), self.opts.modes)
        # checkpoints kept after completion: the re-execution check reads every row
        aid = self.stack.coordinator.start_analysis(TICKER, ANALYSTS, preserve=True)
        self.started.append(aid)
        path = self.workdir / "ledgers" / f"{name or aid}.log"
        return Analysis(aid, mode, path, Ledger(path))

    def _reference_runs(self) -> None:
        """One uninterrupted run per mode, in parallel: the results every analysis must match."""
        runs = {m: self._new_analysis(m, f"reference-{m}") for m in self.opts.modes}
        children = {mode: self._prepare(a, "run") for mode, a in runs.items()}
        for mode, child in children.items():
            self._go(runs[mode], child)
        summary = []
        for mode, a in runs.items():
            self._reap(a, children[mode], FINAL_TIMEOUT)
            status = self.stack.analyses.get(a.aid).status
            entries = read_ledger(a.ledger_path)
            repeats, _ = duplicate_calls(entries)
            calls = sum(1 for e in entries if e.kind == CALL)
            if status != "completed" or repeats:
                raise RuntimeError(
                    f"the uninterrupted {mode} run ended {status} with {repeats} repeated"
                    f" calls; see {a.ledger_path} and {self.workdir / 'children.log'}"
                )
            self.references[mode] = self._results(a.aid)
            a.ledger.close()
            summary.append(f"{mode} {calls} calls")
        self._say("uninterrupted runs: " + ", ".join(summary))

    def _results(self, aid: str) -> dict[str, Any]:
        cp = self.stack.checkpointer
        return {t: cp.restore_checkpoint(aid, t).checkpoint.interim_results for t in AGENT_TYPES}

    # -- rounds ---------------------------------------------------------------------------------
    def _round(self, n: int) -> None:
        rng = round_rng(self.seed, n)
        self.where = f"round {n}"
        if self.current is None:
            self.current = self._new_analysis()
            self.tally.analyses[self.current.aid] = AnalysisCounts()
            self.tally.modes[self.current.mode] += 1
        a = self.current
        kind = choose_kind(rng, a.mode, self.redis.can_restart)
        a.ledger.write(ROUND, n, kind)
        rounds: dict[str, Callable[[Analysis, random.Random], None]] = {
            "kill": self._kill_round,
            "commit": self._commit_round,
            "pause": self._pause_round,
            "flush": self._flush_round,
            "restart": self._restart_round,
        }
        try:
            rounds[kind](a, rng)
        except RoundAborted as exc:
            self._fail(f"{self.where}, analysis {a.aid} ({a.mode}): {exc}")
        finally:
            for child in list(self._live):
                self._kill(a, child, "round aborted")
                self._reap(a, child)
        self.tally.rounds = n
        self._check(a)

    def _first(self, a: Analysis) -> str:
        return "run" if a.steps == 0 else "resume"

    def _delay(self, rng: random.Random) -> float:
        """Often early (recovery, the first subtask), otherwise anywhere in the run."""
        if rng.random() < 0.3:
            return rng.uniform(0, 0.03)
        return rng.uniform(0, self.opts.max_delay)

    def _kill_round(self, a: Analysis, rng: random.Random) -> None:
        runner = self._prepare(a, self._first(a))
        self._go(a, runner)
        time.sleep(self._delay(rng))
        self._kill(a, runner, "delay")
        self._end_runner(a, runner, lone=True)

    def _commit_round(self, a: Analysis, rng: random.Random) -> None:
        runner = self._prepare(a, self._first(a), cache_kill_at=rng.randint(1, 4))
        self._go(a, runner)
        self._end_runner(a, runner, lone=True)

    def _flush_round(self, a: Analysis, rng: random.Random) -> None:
        self._redis_round(a, rng, restart=False)

    def _restart_round(self, a: Analysis, rng: random.Random) -> None:
        self._redis_round(a, rng, restart=True)

    def _redis_round(self, a: Analysis, rng: random.Random, restart: bool) -> None:
        runner = self._prepare(a, self._first(a))
        self._go(a, runner)
        time.sleep(self._delay(rng))
        # the line goes after the loss is complete: a restart takes a while, and what
        # a subtask wrote before it ends is lost too
        if restart:
            self.redis.restart()
            a.ledger.write(FAULT, "redis-restart", f"{time.time():.6f}")
            self.stack.redis.connection_pool.disconnect()
            self.tally.redis_restart += 1
        else:
            self.redis.flush(self.prefix)
            a.ledger.write(FAULT, "redis-flush", f"{time.time():.6f}")
            self.tally.redis_flush += 1
        if rng.random() < 0.5:
            time.sleep(self._delay(rng))
            self._kill(a, runner, "after-redis-loss")
        self._end_runner(a, runner, lone=True)

    def _pause_round(self, a: Analysis, rng: random.Random) -> None:
        runner = self._prepare(a, self._first(a))
        pauser = self._prepare(a, "pause")
        self._go(a, runner)
        time.sleep(self._delay(rng))
        if runner.alive():
            self.tally.pause_races += 1
        self._go(a, pauser)
        kill_runner, kill_pauser = rng.random() < 0.35, rng.random() < 0.15
        if kill_pauser:
            time.sleep(rng.uniform(0, 0.05))
            self._kill(a, pauser, "pausing")
        if kill_runner:
            time.sleep(rng.uniform(0, 0.1))
            self._kill(a, runner, "pause-race")
        self._end_runner(a, runner, lone=False)
        self._reap(a, pauser)
        if self.stack.analyses.get(a.aid).status in FINISHED:
            return
        resumer = self._prepare(a, "resume")  # a fresh process
        self._go(a, resumer)
        if rng.random() < 0.5:
            time.sleep(self._delay(rng))
            self._kill(a, resumer, "delay")
        self._end_runner(a, resumer, lone=True)

    # -- children -------------------------------------------------------------------------------
    def _prepare(self, a: Analysis, action: str, cache_kill_at: int = 0) -> Child:
        child = self.pool.take()
        order = Order(
            action,
            a.aid,
            a.mode,
            self.redis.url,
            self.pg.url,
            str(self.workdir / "data"),
            self.prefix,
            str(a.ledger_path),
            cache_kill_at,
        )
        try:
            child.send(order.to_json())
        except OSError as exc:  # it died before reading its order
            child.wait(10)
            child.close()
            raise RoundAborted(f"a {action} child died before its order: {exc}") from None
        line = child.readline(READY_TIMEOUT)
        if line != "ready":
            child.kill("not ready")
            rc = child.wait(10)
            rest = child.remaining_lines()
            child.close()
            raise RoundAborted(f"a {action} child did not get ready ({line!r}, rc {rc}): {rest}")
        child.action = action
        self._live.append(child)
        return child

    def _go(self, a: Analysis, child: Child) -> None:
        child.send("go")
        if child.action != "pause":
            a.steps += 1

    def _kill(self, a: Analysis, child: Child, reason: str) -> None:
        if child.alive():
            a.ledger.write(KILL, child.pid, reason)
            child.kill(reason)

    def _reap(self, a: Analysis, child: Child, timeout: float = REAP_TIMEOUT) -> dict[str, Any]:
        """Wait for the child, log its exit; returns what it printed at the end ({} if nothing)."""
        rc = child.wait(timeout)
        if rc is None:
            self.tally.hung += 1
            self._fail(
                f"{self.where}, analysis {a.aid} ({a.mode}): child {child.pid}"
                f" still running {timeout:.0f} s after go; killed"
            )
            self._kill(a, child, "timeout")
            rc = child.wait(30)
        a.ledger.write(EXIT, child.pid, rc)
        if child in self._live:
            self._live.remove(child)
        outcome: dict[str, Any] = {}
        for line in child.remaining_lines():
            kind, _, payload = line.partition(" ")
            if kind == "done":
                outcome = json.loads(payload)
            elif kind == "error":
                self.tally.child_errors[json.loads(payload)["type"]] += 1
        child.close()
        return outcome

    def _end_runner(self, a: Analysis, child: Child, lone: bool) -> None:
        """Reap a run/resume child; a resume that ran alone must never be refused."""
        outcome = self._reap(a, child)
        if "resumed" not in outcome:
            return
        if outcome["taken_over"]:
            self.tally.takeovers += 1
        if not outcome["resumed"] and lone:
            self.tally.stuck += 1
            self._fail(
                f"{self.where}, analysis {a.aid} ({a.mode}): resume refused with no other"
                f" runner alive: {outcome.get('message')}"
            )

    # -- invariants -----------------------------------------------------------------------------
    def _runner_gone(self, aid: str) -> bool:
        deadline = time.monotonic() + RUNNER_GRACE
        while self.stack.analyses.has_runner(aid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def _check(self, a: Analysis) -> None:
        """After a round (every child of it reaped): recount the analysis, judge it."""
        where = f"{self.where}, analysis {a.aid} ({a.mode})"
        if not self._runner_gone(a.aid):
            self.tally.stuck += 1
            self._fail(f"{where}: runner lock still held, every child dead")
        status = self.stack.analyses.get(a.aid).status
        entries = read_ledger(a.ledger_path)
        counts = self.tally.analyses[a.aid]
        counts.kills = count_phases(entries)
        counts.calls = sum(1 for e in entries if e.kind == CALL)
        rows = self._rows(a.aid)
        events = [e for e in self.stack.analyses.timeline(a.aid) if e["kind"] == "rolled_back"]
        rolled = [e["detail"] for e in events]
        unexplained = unexplained_rollbacks(
            entries, rows, [(e["at"].timestamp(), e["detail"]) for e in events]
        )
        if rolled and a.mode != "hybrid":
            self._fail(f"{where}: rolled back in {a.mode} mode: {rolled}")
        elif len(unexplained) > a.unexplained:
            self._fail(f"{where}: rolled back with no Redis loss: {unexplained[a.unexplained :]}")
            a.unexplained = len(unexplained)
        rerun = frozenset((d["agent_type"], s) for d in rolled for s in d["rerun"])
        counts.rollbacks, counts.rerun = len(rolled), sum(len(d["rerun"]) for d in rolled)
        counts.all_repeats, repeats = duplicate_calls(entries, _committed(rows), rerun)
        new = [r for r in repeats if r.excess > a.reported.get(r.key, 0)]
        if new:
            detail = "; ".join(
                f"{r.key} made {r.made}x ({r.excused} excused, pids {r.pids})" for r in new
            )
            self._fail(f"{where}: duplicate calls: {detail}")
            a.reported.update((r.key, r.excess) for r in new)
        counts.duplicate_calls = sum(r.excess for r in repeats)
        found = reexecutions(starts(entries), rows, rerun)
        if len(found) > counts.reexecuted:
            detail = "; ".join(
                f"{s.agent_type}/{s.subtask} from seq {s.seq} by {s.runner}"
                for s in found[counts.reexecuted :]
            )
            self._fail(f"{where}: re-executed committed work: {detail}")
        counts.reexecuted = len(found)
        if status == "completed":
            self.tally.completed += 1
            got = self._results(a.aid)
            wrong = [t for t in AGENT_TYPES if got[t] != self.references[a.mode][t]]
            if wrong:
                self.tally.wrong_results += 1
                self._fail(f"{where}: results differ for {', '.join(wrong)}")
        elif status in FINISHED:
            self.tally.failed += 1
            self._fail(f"{where}: the analysis ended {status}")
        if status in FINISHED:
            a.ledger.close()
            self.current = None

    def _rows(self, aid: str) -> list[CheckpointRow]:
        with self.stack.pg.connection() as conn:
            rows = conn.execute(
                "SELECT agent_type, seq, writer, completed_subtasks, checkpoint_time"
                " FROM agent_checkpoints WHERE analysis_id = %s",
                (aid,),
            ).fetchall()
        return [
            CheckpointRow(str(r[0]), int(r[1]), str(r[2]), frozenset(r[3]), r[4].timestamp())
            for r in rows
        ]

    def _finish(self) -> None:
        """Resume the analysis in progress once more, without faults; then all must be done."""
        a = self.current
        self.where = "final resume"
        if a is not None:
            if self.stack.analyses.get(a.aid).status not in FINISHED:
                child = self._prepare(a, self._first(a))
                self._go(a, child)
                outcome = self._reap(a, child, FINAL_TIMEOUT)
                if outcome.get("resumed") is False:
                    self._fail(
                        f"final resume of {a.aid} ({a.mode}) refused: {outcome.get('message')}"
                    )
            self._check(a)
        run = [aid for aid in self.tally.analyses]
        with self.stack.pg.connection() as conn:
            rows = conn.execute(
                "SELECT analysis_id, status FROM analyses WHERE analysis_id = ANY(%s::uuid[])",
                (run,),
            ).fetchall()
        for aid, status in rows:
            if status not in FINISHED:
                self.tally.stuck += 1
                self._fail(f"analysis {aid} left {status} after the final resume")


def _committed(rows: list[CheckpointRow]) -> Callable[[str, str, float], bool]:
    """Whether a subtask's checkpoint had been written by a time (see ``lost_with_redis``)."""

    def committed(agent_type: str, subtask: str, at: float) -> bool:
        return any(
            r.agent_type == agent_type and subtask in r.completed and r.time <= at for r in rows
        )

    return committed


def run_chaos(opts: Options, out: TextIO | None = None) -> Tally:
    """Run the chaos rounds; the tally says what happened (``.ok``, ``.table()``)."""
    return Engine(opts, out).run()


def main(argv: list[str] | None = None) -> int:
    """Command line: 0 if every invariant held, 1 if not."""
    p = argparse.ArgumentParser(prog="python -m tests.chaos.rounds", description=__doc__)
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    p.add_argument(
        "--redis-url",
        default=os.environ.get("AMBER_REDIS_URL") or None,
        help="an external Redis (default AMBER_REDIS_URL; unset: an own embedded one,"
        " the only kind that can be restarted)",
    )
    p.add_argument(
        "--database-url",
        default=os.environ.get("AMBER_DATABASE_URL") or None,
        help="PostgreSQL (default AMBER_DATABASE_URL; unset: an embedded one)",
    )
    p.add_argument("--workdir", type=Path, default=None, help="ledgers and logs (default: temp)")
    p.add_argument("--keep", action="store_true", help="keep the workdir and the run's rows")
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"durability modes to draw from, comma-separated (default {','.join(MODES)})",
    )
    p.add_argument("--max-delay", type=float, default=0.3, help="longest random delay, s")
    args = p.parse_args(argv)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        p.error(f"unknown modes: {', '.join(sorted(unknown))}")
    opts = Options(
        rounds=args.rounds,
        seed=args.seed,
        redis_url=args.redis_url,
        database_url=args.database_url,
        workdir=args.workdir,
        keep=args.keep,
        max_delay=args.max_delay,
        modes=tuple(m for m in args.modes.split(",") if m),
    )
    return 0 if run_chaos(opts).ok else 1


if __name__ == "__main__":
    sys.exit(main())
