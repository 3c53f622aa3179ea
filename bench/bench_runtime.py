"""Workers under fire: ``amber worker`` processes sharing a queue while one of them is
SIGKILLed and restarted every few seconds.

    PYTHONPATH=src .venv/bin/python bench/bench_runtime.py [--analyses 1000] [--workers 4]
        [--kill-every 5] [--concurrency 4] [--step-ms 2] [--seed S] [--quick]

``--analyses`` analyses of 3 function agents x 5 durable steps (``_runtime_app.py``) are
queued, then ``--workers`` worker processes (the ``amber worker`` command) run them;
every ``--kill-every`` seconds a random worker is SIGKILLed and a new one started. It
prints:

* steps/s: steps recorded over the time from the first worker's start to the last
  analysis completed (kills, restarts and takeovers included);
* step overhead: amber's own time per step, measured in the worker around each
  ``ctx.step`` call that ran its function, minus the function's own time (the ledger
  write and ``--step-ms`` of sleep): checking the run may go on, JSON round trip of the
  result, the checkpoint written to PostgreSQL and Redis;
* takeover latency: from a worker's death to each ``taken_over`` event of an analysis
  it held, beside the lease length (a dead worker's liveness lock goes with its
  connection, so its leases need not lapse first; a takeover also waits for another
  worker to have a free slot);
* re-executed completed steps (a start of a step after the start whose result was
  recorded: must be 0) and analyses left unfinished (must be 0). Either one not 0
  makes the exit code 1.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _runtime_app as rt
from _harness import Engines, engines, header, print_table

from amber.runtime.worker import name_in_banner

BENCH = Path(__file__).resolve().parent
SRC = BENCH.parent / "src"
CLI = "from amber.cli import main; main()"
QUICK = {"analyses": 12, "workers": 2, "kill_every": 1.5, "concurrency": 2}
FINISH_TIMEOUT = 1800.0
"""Seconds the run may take before the analyses not completed are counted unfinished."""


@dataclass
class Worker:
    popen: subprocess.Popen[bytes]
    out: Path

    def name(self) -> str | None:
        """The worker's id (``host:pid:token``), once it printed its first line."""
        return name_in_banner(self.out.read_text(errors="replace") if self.out.exists() else "")


@dataclass
class Fleet:
    eng: Engines
    workdir: Path
    concurrency: int
    workers: list[Worker] = field(default_factory=list)
    deaths: list[tuple[float, str]] = field(default_factory=list)
    """(wall-clock time of the SIGKILL, the worker's id) of every killed worker."""

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PYTHONPATH=os.pathsep.join([str(SRC), str(BENCH)]),
            AMBER_REDIS_URL=self.eng.redis_url,
            AMBER_DATABASE_URL=self.eng.database_url,
            AMBER_PREFIX=self.eng.prefix,
            AMBER_DATA_DIR=str(self.eng.data_dir),
            AMBER_WORKER_POLL="0.1",
        )
        return env

    def start(self) -> Worker:
        out = self.workdir / f"worker{len(self.workers)}.out"
        with out.open("wb") as o:
            popen = subprocess.Popen(
                [sys.executable, "-c", CLI, "worker", "--app", "_runtime_app:app",
                 "--concurrency", str(self.concurrency)],
                stdout=o, stderr=subprocess.STDOUT, env=self.env(), cwd=self.workdir,
            )  # fmt: skip
        w = Worker(popen, out)
        self.workers.append(w)
        return w

    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.popen.poll() is None]

    def kill(self, w: Worker) -> None:
        name = w.name()
        w.popen.send_signal(signal.SIGKILL)
        at = time.time()
        w.popen.wait(timeout=60)
        if name is not None:  # one that had not started yet held nothing
            self.deaths.append((at, name))

    def stop(self) -> None:
        for w in self.alive():
            w.popen.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                w.popen.kill()
                w.popen.wait(timeout=60)


def completed(eng: Engines) -> int:
    with eng.stack.pg.connection() as conn:
        row = conn.execute("SELECT count(*) FROM analyses WHERE status = 'completed'").fetchone()
    return int(row[0]) if row else 0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def audit(eng: Engines, ledger: Path, aids: list[str]) -> dict[str, Any]:
    """Re-executed completed steps, unfinished analyses, wrong results, overheads."""
    with eng.stack.pg.connection() as conn:
        status = dict(conn.execute("SELECT analysis_id::text, status FROM analyses").fetchall())
        kept = conn.execute(
            "SELECT analysis_id::text, agent_type, status, result FROM analysis_results"
        ).fetchall()
    recorded: dict[tuple[str, str, str], str] = {}
    wrong = 0
    for aid, agent_type, st, result in kept:
        if st != "completed" or (result or {}).get("total") != rt.expected(aid, agent_type):
            wrong += 1
        for i, token in enumerate((result or {}).get("tokens") or []):
            recorded[(aid, agent_type, f"s{i}")] = token
    seen: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    overhead_ms, function_ms = [], []
    for line in ledger.read_text().splitlines():
        w = line.split()
        if len(w) == 6 and w[0] == "start":
            seen[(w[1], w[2], w[3])].append(w[5])
        elif len(w) == 3 and w[0] == "time":
            total, fn = float(w[1]) / 1000, float(w[2]) / 1000
            overhead_ms.append(total - fn)
            function_ms.append(fn)
    reexecuted = repeats = 0
    for key, tokens in seen.items():
        repeats += len(tokens) - 1
        if key in recorded and recorded[key] in tokens:
            reexecuted += len(tokens) - 1 - tokens.index(recorded[key])
    return {
        "unfinished": sum(1 for a in aids if status.get(a) != "completed"),
        "wrong": wrong,
        "reexecuted": reexecuted,
        "repeats": repeats,
        "steps": len(recorded),
        "overhead_ms": overhead_ms,
        "function_ms": function_ms,
    }


def takeovers(eng: Engines, deaths: list[tuple[float, str]]) -> list[float]:
    """Seconds from each death to each takeover of an analysis from the dead worker."""
    with eng.stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM at), detail->>'taken_over_from' FROM analysis_events"
            " WHERE kind = 'taken_over'"
        ).fetchall()
    out = []
    for at, prior in rows:
        for died, name in deaths:
            if str(prior).startswith(f"{name}:"):
                out.append(float(at) - died)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--analyses", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--kill-every", type=float, default=5.0, help="seconds; 0: no kills")
    ap.add_argument("--concurrency", type=int, default=4, help="analyses per worker")
    ap.add_argument("--step-ms", type=float, default=2.0, help="each step's own work")
    ap.add_argument("--seed", type=int, default=20_261_123)
    ap.add_argument("--quick", action="store_true", help="a tiny run (smoke test)")
    args = ap.parse_args()
    if args.quick:
        for k, v in QUICK.items():
            setattr(args, k, v)
    rng = random.Random(args.seed)
    with engines("bench-runtime") as eng, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ledger = workdir / "ledger"
        lease = eng.stack.settings.lease_seconds
        header("bench_runtime: amber worker processes, one SIGKILLed every few seconds", eng, {
            "work": f"{args.analyses} analyses x {len(rt.AGENTS)} agents x {rt.STEPS} steps,"
                    f" {args.step_ms:g} ms of work per step",
            "workers": f"{args.workers} processes x concurrency {args.concurrency},"
                       f" lease {lease:g} s, poll 0.1 s",
            "faults": f"SIGKILL + restart of a random worker every {args.kill_every:g} s"
                      f" (seed {args.seed})" if args.kill_every > 0 else "none",
        })  # fmt: skip
        doc = {"ledger": str(ledger), "step_ms": args.step_ms}
        aids = [rt.app.submit(eng.stack, rt.DEFINITION, doc) for _ in range(args.analyses)]
        fleet = Fleet(eng, workdir, args.concurrency)
        t0 = time.monotonic()
        for _ in range(args.workers):
            fleet.start()
        next_kill = t0 + args.kill_every if args.kill_every > 0 else float("inf")
        kills = 0
        try:
            while completed(eng) < len(aids) and time.monotonic() - t0 < FINISH_TIMEOUT:
                if time.monotonic() >= next_kill:
                    alive = fleet.alive()
                    fleet.kill(alive[rng.randrange(len(alive))])
                    fleet.start()
                    kills += 1
                    next_kill += args.kill_every
                time.sleep(0.1)
            elapsed = time.monotonic() - t0
        finally:
            fleet.stop()
        found = audit(eng, ledger, aids)
        latency = takeovers(eng, fleet.deaths)
    over, fn = found["overhead_ms"], found["function_ms"]
    rows: list[tuple[str, ...] | str] = [
        ("steps/s (kills, restarts and takeovers included)", str(found["steps"]), "", "", "",
         f"{found['steps'] / elapsed:,.0f}"),
        ("step overhead, ms (amber's time per step)", str(len(over)), f"{pct(over, .5):.2f}",
         f"{pct(over, .99):.2f}", f"{max(over, default=float('nan')):.2f}", ""),
        ("step function, ms (ledger write + sleep)", str(len(fn)), f"{pct(fn, .5):.2f}",
         f"{pct(fn, .99):.2f}", f"{max(fn, default=float('nan')):.2f}", ""),
        (f"takeover latency, s (lease {lease:g} s)", str(len(latency)),
         f"{pct(latency, .5):.2f}", f"{pct(latency, .99):.2f}",
         f"{max(latency, default=float('nan')):.2f}", ""),
        ("workers SIGKILLed", str(kills), "", "", "", ""),
        ("steps run again after a kill (in flight)", str(found["repeats"]), "", "", "", ""),
        ("re-executed completed steps (must be 0)", str(found["reexecuted"]), "", "", "", ""),
        ("analyses left unfinished (must be 0)", str(found["unfinished"]), "", "", "", ""),
        ("agent results differing from a clean run", str(found["wrong"]), "", "", "", ""),
    ]  # fmt: skip
    print_table(("measure", "n", "p50", "p99", "max", "rate"), rows, right={1, 2, 3, 4, 5})
    print(f"wall time {elapsed:.1f} s from the first worker's start to the last completion.")
    bad = found["reexecuted"] or found["unfinished"] or found["wrong"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
