"""The cost of one durable step along a long run: does step 1,000 cost what step 1 does?

    PYTHONPATH=src .venv/bin/python bench/bench_steps.py [--steps 1000] [--runs 3] [--quick]

One function agent (``amber.App``) runs ``--steps`` durable steps in a row, each a
trivial function, so what is timed is amber's own work per step: the step's record (the
checkpoint row committed to PostgreSQL, in the default ``checkpoint`` durability) and
its Redis copies. The agent times each step from the return of the one before; the
table gives windows of 50 steps along the run (median, p99) and each window's ratio to
the first, and the process's CPU time per step (mean) beside it. ``--runs`` runs go one
after another in the same database, so the later ones also show what a table that
already holds earlier runs' checkpoints costs; the goal is judged on the median run.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import argparse
import statistics
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
    cpu: list[float] = []
    app = amber.App("bench-steps")

    @app.agent
    def long_run(ctx: Any) -> int:
        last, last_cpu = time.perf_counter(), time.process_time()
        for i in range(steps):
            ctx.step(f"s{i}", int, i)
            now, now_cpu = time.perf_counter(), time.process_time()
            times.append((now - last) * 1000)
            cpu.append((now_cpu - last_cpu) * 1000)
            last, last_cpu = now, now_cpu
        return steps

    windows = sorted({0, 150, steps // 2, steps - 50} & set(range(0, steps - 49)))
    with engines("steps") as eng:
        header("bench_steps: one durable step along a long run", eng)
        rows: list[tuple[str, ...] | str] = []
        ends: list[tuple[float, float]] = []  # each run's last window over its first
        with amber.connect(eng.redis_url, eng.database_url, prefix=eng.prefix) as stack:
            for run in range(1, args.runs + 1):
                times.clear()
                cpu.clear()
                app.run(stack, app.submit(stack, [long_run], {}))
                rows.append(f"run {run} of {args.runs}: {steps} steps")
                first = stats(times[:50]).p50
                first_cpu = sum(cpu[:50]) / 50
                for start in windows:
                    st = stats(times[start : start + 50])
                    ratio = st.p50 / first
                    mean_cpu = sum(cpu[start : start + 50]) / 50
                    rows.append(
                        (
                            f"steps {start + 1}-{start + 50}",
                            f"{st.p50:.3f}",
                            f"{st.p99:.3f}",
                            f"{ratio:.2f}x",
                            f"{mean_cpu:.3f}",
                            f"{mean_cpu / first_cpu:.2f}x",
                            "",
                            "",
                        )
                    )
                ends.append((ratio, mean_cpu / first_cpu))
        # one run's windows are a second apart on a shared machine: judge the median run
        ratio, cpu_ratio = (statistics.median(e[i] for e in ends) for i in (0, 1))
        rows.append(f"median of the {len(ends)} runs")
        rows.append(
            (f"steps {windows[-1] + 1}-{windows[-1] + 50}", "", "", f"{ratio:.2f}x", "",
             f"{cpu_ratio:.2f}x", f"<= {GOAL}x", "yes" if ratio <= GOAL else "NO")
        )  # fmt: skip
        print_table(
            (
                "window",
                "median ms",
                "p99 ms",
                "vs steps 1-50",
                "cpu ms",
                "cpu vs 1-50",
                "goal",
                "met",
            ),
            rows,
            right={1, 2, 3, 4, 5},
        )


if __name__ == "__main__":
    main()
