"""How long the command line takes to start, beside the bare interpreter (issue 13).

    .venv/bin/python bench/bench_cli.py [--quick]

Each command runs as a new process, as a user types it: ``amber --help``, the help
of a command group and of a command, and ``python -c pass`` (the interpreter alone,
the floor no command can go below), interleaved round by round. Needs no server: help
must not import a driver (``tests/test_engines.py`` checks that too). Goal: every
command starts in at most 0.3 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import print_table, quick_flag, series, stats

GOAL_S = 0.3
AMBER = str(Path(sys.executable).with_name("amber"))
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "amber --help": [AMBER, "--help"],
    "amber checkpoints --help": [AMBER, "checkpoints", "--help"],
    "amber worker --help": [AMBER, "worker", "--help"],
}


def run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    n = 5 if quick_flag() else 30
    out = series({name: lambda i, a=argv: run(a) for name, argv in COMMANDS.items()}, n)
    floor = stats(out["python -c pass"]).p50
    rows: list[tuple[str, ...] | str] = []
    for name, samples in out.items():
        s = stats(samples)
        met = "" if name.startswith("python") else ("yes" if s.p50 <= GOAL_S * 1000 else "NO")
        rows.append((name, str(s.n), f"{s.p50:.0f}", f"{s.p99:.0f}", f"{s.p50 / floor:.2f}x", met))
    print(f"# bench_cli: command-line start-up, {n} runs each, interleaved")
    print(f"command:    {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine:    nproc={os.cpu_count()}, load avg {' '.join(map(str, os.getloadavg()))}")
    print(f"python:     {sys.version.split()[0]}")
    print_table(
        ("command", "n", "p50 ms", "p99 ms", "vs python", f"<= {GOAL_S:g} s"),
        rows,
        right={1, 2, 3, 4},
    )
    print("vs python: the command's median over the bare interpreter's, in the same rounds.")


if __name__ == "__main__":
    main()
