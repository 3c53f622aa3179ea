"""The PostgreSQL failover window under running workers.

    PYTHONPATH=src .venv/bin/python bench/bench_pg_failover.py [--rounds 3] [--workers 4] [--quick]

Each round starts a primary and a synchronous streaming standby (``tests/pg_pair.py``),
runs 12 analyses on ``--workers`` ``amber worker`` processes given the multi-host URL,
SIGKILLs the primary once a share of the steps has started and promotes the standby
(``tests.chaos.pg_failover``). The table gives, per round: the window as a client sees
it (a connection issuing ``SELECT 1`` every 10 ms, from its first failed statement to
its first successful one), the PostgreSQL failures the workers logged, steps started
again (their record never committed) and broken promises (must be 0).

Redis: AMBER_REDIS_URL if set, else an embedded one in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.pg_pair, tests.chaos
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import engines, header, print_table, quick_flag

from tests.chaos.pg_failover import run_failover


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick or quick_flag():
        args.rounds = 1
    seed = args.seed if args.seed is not None else secrets.randbits(32)
    with engines("pgfo") as eng:
        os.environ["AMBER_REDIS_URL"] = eng.redis_url
        os.environ["AMBER_PREFIX"] = eng.prefix
        header("bench_pg_failover: the window of a PostgreSQL failover", eng,
               {"workers": str(args.workers), "seed": str(seed)})  # fmt: skip
        rows: list[tuple[str, ...] | str] = []
        windows = []
        for n in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="amber-pgfo-") as tmp:
                t = run_failover(seed + n, Path(tmp), 12, args.workers)
            windows.append(t.window_s)
            rows.append((f"round {n + 1}", f"{t.window_s:.2f}", str(t.logged_failures),
                         str(t.repeats), str(t.analyses), str(len(t.problems))))  # fmt: skip
        rows.append(("median", f"{statistics.median(windows):.2f}", "", "", "", ""))
        print_table(
            ("round", "window s", "failures logged", "steps again", "completed", "broken"),
            rows,
            right={1, 2, 3, 4, 5},
        )


if __name__ == "__main__":
    main()
