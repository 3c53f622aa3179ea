"""Frozen workers: real ``amber worker`` processes SIGSTOPped at random, long enough for
their leases to lapse and another worker to take their analyses over, then SIGCONTed.

    python -m tests.chaos.frozen --rounds 500 [--seed S]

A round freezes one live worker (chosen from the seed) after a random delay, keeps it
stopped past the stuck bound, and lets it go on. Analyses of ``tests.runtime.workapp``
(each step notes its start in an fsync'd ledger, writes its token to working memory
after its wait, and each agent ends with an at-most-once payment that takes an
idempotency key) are kept in flight throughout. At the end every analysis must have
completed, and:

* no recorded step started again, and a step started twice only where the earlier start
  was in a process that was frozen (the one call a frozen process was inside);
* no payment made twice but by a process that was frozen inside it (and then with the
  same idempotency key): the step's intent begun before the analysis changed hands;
* no checkpoint written by a run that did not hold the analysis (two runs interleaved),
  no event after ``completed``, and no event of a run after another took it over;
* every agent's working memory holds the token of each step its result recorded (a
  write of a woken run after the takeover would have replaced it);
* every result equal to an uninterrupted run's.

Every choice comes from the seed (printed first), so a failure can be replayed.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

import amber
from amber.engines.embedded import ensure_embedded, stop_embedded
from tests.chaos.report import measure_table
from tests.runtime import fleet, workapp
from tests.runtime.fleet import Fleet, audit, wait_until

LEASE = 0.5
STUCK = 1.5
"""Seconds a live but silent owner keeps its analyses: a frozen worker loses them after."""
WORKERS = 3
IN_FLIGHT = 4
"""Analyses kept unfinished while the rounds run."""
FINISH_TIMEOUT = 180.0


@dataclass
class FrozenTally:
    """What a run did and every promise it found broken."""

    seed: int
    rounds: int = 0
    analyses: int = 0
    takeovers: int = 0
    stuck_reports: int = 0
    repeats: int = 0
    payments: int = 0
    problems: list[str] = field(default_factory=list)

    def table(self) -> str:
        """The figures, one per line, then the replay command and the problems."""
        rows = [
            ("freezes (rounds)", self.rounds),
            ("analyses completed", self.analyses),
            ("takeovers of a frozen worker's analyses", self.takeovers),
            ("of them reported stuck", self.stuck_reports),
            ("steps started again (in flight at a freeze)", self.repeats),
            ("payments made", self.payments),
            ("broken promises", len(self.problems)),
        ]
        lines = measure_table([(k, f"{v:,}") for k, v in rows])
        lines.append(
            f"replay: python -m tests.chaos.frozen --rounds {self.rounds} --seed {self.seed}"
        )
        lines += [f"BROKEN: {p}" for p in self.problems[:30]]
        return "\n".join(lines)


def run_frozen(rounds: int, seed: int, workdir: Path, out: TextIO | None = None) -> FrozenTally:
    """Run ``rounds`` freezes against the servers ``AMBER_REDIS_URL`` and
    ``AMBER_DATABASE_URL`` name (the workers are started with the same environment)."""

    def say(text: str) -> None:
        if out is not None:
            print(text, file=out, flush=True)

    rng = random.Random(seed)
    tally = FrozenTally(seed)
    settings = {
        "lease_seconds": str(LEASE),
        "stuck_seconds": str(STUCK),
        "worker_poll": "0.1",
    }
    workers = Fleet(fleet.new_tag(), workdir / "workers", concurrency=2, settings=settings)
    app, book = workapp.make_app(workers.tag), workdir / "ledger"
    frozen: set[int] = set()
    with amber.connect() as stack:
        aids: list[str] = []
        try:
            procs = [workers.start() for _ in range(WORKERS)]
            workers.wait_ready(procs)

            def top_up() -> None:
                open_ = [s for s in fleet.statuses(stack, aids).values() if s != "completed"]
                for _ in range(IN_FLIGHT - len(open_)):
                    doc = {"ledger": str(book), "sleep": 0.15, "pay": True, "memory": True}
                    aids.append(app.submit(stack, workapp.DEFINITION, doc, preserve=True))

            for n in range(1, rounds + 1):
                top_up()
                victim = rng.choice(workers.alive())
                time.sleep(rng.uniform(0.0, 0.6))
                victim.popen.send_signal(signal.SIGSTOP)
                frozen.add(victim.pid)
                time.sleep(STUCK + rng.uniform(0.3, 1.2))
                victim.popen.send_signal(signal.SIGCONT)
                tally.rounds = n
                if n % max(1, rounds // 10) == 0:
                    say(f"round {n}/{rounds}: {len(aids)} analyses submitted")
            wait_until(fleet.all_finished(stack, aids), FINISH_TIMEOUT, "all analyses complete")
        except AssertionError as exc:
            tally.problems.append(str(exc).splitlines()[0])
        finally:
            workers.close()  # SIGCONTs a worker the run left stopped first
        _judge(stack, aids, book, frozen, tally)
        if tally.problems:
            tally.problems.append(f"workers' logs in {workdir}: {workers.report()[-1500:]}")
    return tally


def _judge(
    stack: amber.Stack, aids: list[str], book: Path, frozen: set[int], tally: FrozenTally
) -> None:
    report = audit(stack, aids, book, died=frozen)
    tally.analyses = len(aids) - len(report.unfinished)
    tally.takeovers, tally.repeats = report.takeovers, report.repeats
    tally.problems += [f"{k}: {v}" for k, v in report.problems().items()]
    pays: Counter[str] = Counter()
    payer: dict[str, list[int]] = {}
    paid_in: dict[str, str] = {}
    for words in workapp.ledger(book):
        if len(words) == 5 and words[0] == "pay":
            pays[words[3]] += 1
            payer.setdefault(words[3], []).append(int(words[4]))
            paid_in[words[3]] = words[1]
    tally.payments = sum(pays.values())
    for key, made in pays.items():
        if made > 1 and not _inside(stack, paid_in[key], key, payer[key], frozen):
            tally.problems.append(f"payment {key} made {made}x by {payer[key]}")
    for aid in aids:
        events = stack.analyses.timeline(aid)
        kinds = [e["kind"] for e in events]
        if "completed" in kinds and kinds.index("completed") != len(kinds) - 1:
            tally.problems.append(f"{aid}: events after completed: {kinds}")
        gone: set[str] = set()
        for e in events:
            if e["kind"] == "taken_over":
                gone.add(str((e["detail"] or {}).get("taken_over_from")))
                tally.stuck_reports += bool((e["detail"] or {}).get("stuck"))
            elif e["by"] in gone:
                tally.problems.append(f"{aid}: {e['kind']} by {e['by']} after it was taken over")
        for r in stack.analyses.results(aid):
            if not (r["result"] or {}).get("memory_ok"):
                tally.problems.append(f"{aid}: {r['agent_type']}'s memory is not its steps'")


def _inside(
    stack: amber.Stack, analysis_id: str, key: str, payers: list[int], frozen: set[int]
) -> bool:
    """Whether a payment made more than once (``payers``, in the ledger's order) is the
    one call each of all payers but one was inside when it was stopped, made again by
    the run that took over, with the same idempotency key. A payer is excused when it
    was frozen, the analysis was taken from its run, and the step's intent (its key is
    the idempotency key) was begun before that, so while it held the analysis; each
    payer pays once. An excused payer may come last in the ledger: stopped between
    beginning the step and noting its call, it notes it when it wakes. A woken run that
    began the step after its takeover (had its fence let it through) is not excused:
    the intent was begun later than the takeover."""
    if len(set(payers)) != len(payers):
        return False
    with stack.pg.connection() as conn:
        row = conn.execute("SELECT started_at FROM step_intents WHERE step_id = %s", (key,))
        begun = row.fetchone()
    if begun is None:
        return False
    lost: dict[int, list[datetime]] = {}
    for e in stack.analyses.timeline(analysis_id):
        owner = str((e["detail"] or {}).get("taken_over_from") or "").split(":")
        if e["kind"] == "taken_over" and len(owner) > 1 and owner[1].isdigit():
            lost.setdefault(int(owner[1]), []).append(e["at"])
    excused = [p for p in payers if p in frozen and p in lost and begun[0] < min(lost[p])]
    return len(payers) - len(excused) <= 1


def main(argv: list[str] | None = None) -> int:
    """Command line: 0 if every promise held."""
    p = argparse.ArgumentParser(prog="python -m tests.chaos.frozen", description=__doc__)
    p.add_argument("--rounds", type=int, default=500)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbits(32)
    print(f"frozen workers: {args.rounds} rounds, seed {seed}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="amber-frozen-"))
    started = not (os.environ.get("AMBER_REDIS_URL") and os.environ.get("AMBER_DATABASE_URL"))
    if started:  # servers of its own, under the run's directory
        urls = ensure_embedded(workdir / "engines")
        os.environ["AMBER_REDIS_URL"] = os.environ.get("AMBER_REDIS_URL") or urls["redis"]
        os.environ["AMBER_DATABASE_URL"] = os.environ.get("AMBER_DATABASE_URL") or urls["postgres"]
    os.environ["AMBER_PREFIX"] = f"frozen-{secrets.token_hex(5)}"
    t0 = time.monotonic()
    try:
        tally = run_frozen(args.rounds, seed, workdir, sys.stdout)
    finally:
        if started:
            stop_embedded(workdir / "engines")
    print(tally.table(), flush=True)
    print(f"took {time.monotonic() - t0:.1f} s", flush=True)
    if not tally.problems:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if not tally.problems else 1


if __name__ == "__main__":
    sys.exit(main())
