"""The cost of one durable step along a long run: does step 1,000 cost what step 1 does?

    PYTHONPATH=src .venv/bin/python bench/bench_steps.py [--steps 1000] [--runs 3] [--quick]

One function agent (``amber.App``) runs ``--steps`` durable steps in a row, each a
trivial function, so what is timed is amber's own work per step: the step's record (the
checkpoint row committed to PostgreSQL, in the default ``checkpoint`` durability) and
its Redis copies. The agent times each step from the return of the one before; the
table gives windows of 50 steps along the run (median, p99) and each window's ratio to
the first. ``--runs`` runs go one after another in the same database, so the later ones
also show what a table that already holds earlier runs' checkpoints costs.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import engines, header, print_table, quick_flag, stats

import amber

GOAL = 1.1
"""The last window's median over the first window's, at most."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick or quick_flag():
        args.steps, args.runs = 200, 1
    steps: int = args.steps
    times: list[float] = []
    app = amber.App("bench-steps")

    @app.agent
    def long_run(ctx: Any) -> int:
        last = time.perf_counter()
        for i in range(steps):
            ctx.step(f"s{i}", int, i)
            now = time.perf_counter()
            times.append((now - last) * 1000)
            last = now
        return steps

    windows = sorted({0, 150, steps // 2, steps - 50} & set(range(0, steps - 49)))
    with engines("steps") as eng:
        header("bench_steps: one durable step along a long run", eng)
        rows: list[tuple[str, ...] | str] = []
        with amber.connect(eng.redis_url, eng.database_url, prefix=eng.prefix) as stack:
            for run in range(1, args.runs + 1):
                times.clear()
                app.run(stack, app.submit(stack, [long_run], {}))
                rows.append(f"run {run} of {args.runs}: {steps} steps")
                first = stats(times[:50]).p50
                for start in windows:
                    st = stats(times[start : start + 50])
                    ratio = st.p50 / first
                    last = start == windows[-1]
                    rows.append(
                        (
                            f"steps {start + 1}-{start + 50}",
                            f"{st.p50:.3f}",
                            f"{st.p99:.3f}",
                            f"{ratio:.2f}x",
                            f"<= {GOAL}x" if last else "",
                            ("yes" if ratio <= GOAL else "NO") if last else "",
                        )
                    )
        print_table(
            ("window", "median ms", "p99 ms", "vs steps 1-50", "goal", "met"),
            rows,
            right={1, 2, 3},
        )


if __name__ == "__main__":
    main()
