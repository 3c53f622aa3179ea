"""PostgreSQL fails over under running workers: the primary's postmaster SIGKILLed mid-
workload, its synchronous standby promoted (``tests.pg_pair``).

    python -m tests.chaos.pg_failover [--rounds N] [--analyses 12] [--workers 2] [--seed S]

Real ``amber worker`` processes (``tests.runtime.workapp``) are given the multi-host URL
``postgresql://h:p1,h:p2/amber?target_session_attrs=read-write``. Once a share of the
steps has started (chosen from the seed) the primary is killed and the standby promoted.
Every analysis must then complete, and:

* every step record a worker was told was committed (``acked`` in the ledger) is the
  one the analysis kept: nothing acknowledged was lost;
* no step recorded as done ran again;
* no step ran in two processes at once (a start of it between another start and its
  end): the liveness locks went with the old primary, and that alone must not let a
  live run's analysis be taken over;
* every result is an uninterrupted run's, every checkpoint chain whole and written by
  one run at a time.

It prints the failover window as a client sees it: a connection issuing ``SELECT 1``
every 10 ms, from its first failed statement to its first successful one after.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

import amber
from tests.chaos.report import measure_table
from tests.pg_pair import PgPair
from tests.runtime import fleet, workapp
from tests.runtime.fleet import Fleet, audit, wait_until

FINISH_TIMEOUT = 180.0


@dataclass
class FailoverTally:
    """What one failover did, and every promise it found broken."""

    seed: int
    analyses: int = 0
    steps_before: int = 0
    window_s: float = 0.0
    takeovers: int = 0
    repeats: int = 0
    acked: int = 0
    logged_failures: int = 0
    """Lines of the workers' logs that say a PostgreSQL call failed (the window's cost)."""
    problems: list[str] = field(default_factory=list)

    def table(self) -> str:
        """The figures, the replay command and the problems."""
        rows = [
            ("analyses completed", f"{self.analyses}"),
            ("steps started before the kill", f"{self.steps_before}"),
            ("failover window (first failed statement to first success)", f"{self.window_s:.2f} s"),
            ("acknowledged step records checked", f"{self.acked}"),
            ("takeovers", f"{self.takeovers}"),
            ("steps started again (their record never committed)", f"{self.repeats}"),
            ("failures the workers logged", f"{self.logged_failures}"),
            ("broken promises", f"{len(self.problems)}"),
        ]
        lines = measure_table(rows)
        lines.append(f"replay: python -m tests.chaos.pg_failover --seed {self.seed}")
        lines += [f"BROKEN: {p}" for p in self.problems[:30]]
        return "\n".join(lines)


def _ledger(book: Path) -> list[list[str]]:
    return workapp.ledger(book) if book.exists() else []


def concurrent_runs(book: Path) -> list[str]:
    """Steps a start of which came between another process's start and end of them."""
    open_: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
    found = []
    for words in _ledger(book):
        if len(words) != 6 or words[0] not in ("start", "end"):
            continue
        kind, aid, agent, step, pid, token = words
        running = open_[(aid, agent, step)]
        if kind == "start":
            others = [p for t, p in running.items() if p != int(pid)]
            if others:
                found.append(f"{aid} {agent} {step}: started in {pid} while {others} ran it")
            running[token] = int(pid)
        else:
            running.pop(token, None)
    return found


def lost_acks(stack: amber.Stack, aids: list[str], book: Path) -> tuple[int, list[str]]:
    """(acknowledged records, those the analysis did not keep)."""
    kept: dict[tuple[str, str, str], str] = {}
    for aid in aids:
        for r in stack.analyses.results(aid):
            for i, token in enumerate((r["result"] or {}).get("tokens") or []):
                kept[(aid, r["agent_type"], f"s{i}")] = str(token)
    acked, lost = 0, []
    for words in _ledger(book):
        if len(words) == 6 and words[0] == "acked" and words[1] in aids:
            acked += 1
            key = (words[1], words[2], words[3])
            if kept.get(key) != words[5]:
                lost.append(f"{' '.join(key)}: acknowledged {words[5]}, kept {kept.get(key)}")
    return acked, lost


class Prober:
    """A client issuing ``SELECT 1`` every few milliseconds on one connection to the
    multi-host URL, connecting again after an error: the failover window as a client sees
    it, from its first failed statement to its first successful one after."""

    def __init__(self, url: str, every: float = 0.01) -> None:
        self.url, self.every = url, every
        self.failed: float | None = None
        self.recovered: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                conn.execute("SELECT 1").fetchone()
                if self.failed is not None and self.recovered is None:
                    self.recovered = time.monotonic()
            except psycopg.Error:
                if self.failed is None:
                    self.failed = time.monotonic()
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(self.every)
        if conn is not None:
            conn.close()

    @property
    def window(self) -> float:
        """Seconds from the first failed statement to the first successful one (0: none
        failed)."""
        if self.failed is None or self.recovered is None:
            return 0.0
        return self.recovered - self.failed

    def stop(self) -> None:
        """Stop probing."""
        self._stop.set()
        self._thread.join(timeout=10)


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
            conn.execute("SELECT 1 WHERE NOT pg_is_in_recovery()").fetchone()
            return conn.execute("SELECT NOT pg_is_in_recovery()").fetchone() == (True,)
    except psycopg.Error:
        return False


def run_failover(seed: int, workdir: Path, analyses: int = 12, workers: int = 2) -> FailoverTally:
    """One failover under ``workers`` workers running ``analyses`` analyses."""
    rng = random.Random(seed)
    tally = FailoverTally(seed)
    with PgPair() as pair:
        settings = {
            "database_url": pair.url,
            "lease_seconds": "1",
            "stuck_seconds": "4",
            "worker_poll": "0.1",
            "connect_timeout": "2",
        }
        crew = Fleet(fleet.new_tag(), workdir / "workers", concurrency=3, settings=settings)
        app, book = workapp.make_app(crew.tag), workdir / "ledger"
        aids: list[str] = []
        try:
            with amber.connect(database_url=pair.url, connect_timeout=2) as stack:
                procs = [crew.start() for _ in range(workers)]
                crew.wait_ready(procs)
                doc = {"ledger": str(book), "sleep": 0.4, "pay": True, "memory": True}
                aids = [
                    app.submit(stack, workapp.DEFINITION, doc, preserve=True)
                    for _ in range(analyses)
                ]
                total = analyses * len(workapp.KINDS) * workapp.STEPS
                share = int(total * rng.uniform(0.2, 0.5))
                wait_until(
                    lambda: sum(1 for w in _ledger(book) if w[0] == "start") >= share,
                    60,
                    "a share of the steps to start",
                )
                tally.steps_before = sum(1 for w in _ledger(book) if w[0] == "start")
                prober = Prober(pair.url)
                pair.kill_primary()
                pair.promote()
                wait_until(lambda: _answers(pair.url), 60, "the new primary to answer")
                wait_until(lambda: prober.recovered is not None, 30, "the prober to recover")
                prober.stop()
                tally.window_s = prober.window
                wait_until(
                    lambda: _done(stack, aids), FINISH_TIMEOUT, "all analyses complete", procs
                )
                report = audit(stack, aids, book, died={p.pid for p in procs})
                tally.analyses = len(aids) - len(report.unfinished)
                tally.takeovers, tally.repeats = report.takeovers, report.repeats
                tally.problems += [f"{k}: {v}" for k, v in report.problems().items()]
                tally.problems += concurrent_runs(book)
                tally.acked, lost = lost_acks(stack, aids, book)
                tally.problems += [f"lost: {x}" for x in lost]
        except AssertionError as exc:
            tally.problems.append(str(exc).splitlines()[0])
        finally:
            crew.close()
        tally.logged_failures = sum(
            1
            for proc in crew.procs
            for line in proc.stderr().splitlines()
            if "PostgreSQL" in line or "StoreUnavailable" in line
        )
        if tally.problems:
            tally.problems.append(f"workers' logs in {workdir}: {crew.report()[-1500:]}")
    return tally


def _done(stack: amber.Stack, aids: list[str]) -> bool:
    try:
        return fleet.all_finished(stack, aids)()
    except amber.StoreUnavailable:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="PostgreSQL failover under running workers")
    parser.add_argument("--rounds", type=int, default=1, help="failovers, each on a new pair")
    parser.add_argument("--analyses", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbits(32)
    print(f"pg failover seed {seed}, {args.rounds} round(s)", flush=True)
    broken = 0
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="amber-pgfo-") as tmp:
            tally = run_failover(seed + n, Path(tmp), args.analyses, args.workers)
        print(f"round {n + 1}/{args.rounds}", flush=True)
        print(tally.table(), flush=True)
        broken += len(tally.problems)
    return 1 if broken else 0


if __name__ == "__main__":
    os.environ.setdefault("AMBER_CONNECT_TIMEOUT", "2")
    sys.exit(main())
