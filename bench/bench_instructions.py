"""Client instructions per operation, amber against LangGraph's PostgresSaver (issue 25).

    PYTHONPATH=src .venv/bin/python bench/bench_instructions.py [--quick] [--ops N] [--native]

On a machine whose cores are shared, the ratio of two medians moves between runs of the
same code by more than a change to a save's Python does. The instructions the client
process runs for an operation do not: this counts them with ``valgrind --tool=callgrind``
(Debian's ``valgrind`` package). One child process runs under callgrind and does each
operation in turn: sets it up, runs it 50 times (5 with ``--quick``) to warm up, zeroes
the counters (``callgrind_control -z``), runs it ``--ops`` times (200; 10 with
``--quick``) and dumps the counters under the operation's name. The servers run natively
and are not counted; only the client's own work is, Python and the C it calls (drivers,
zstd, hashing; SHA-256 runs without the CPU's SHA instructions under valgrind, so it
counts for more than it costs).

The operations are ``bench_save.py``'s 5-key save (amber, ``durability=checkpoint``; a
deferred batch of 5 new values, then the save), LangGraph's ``put`` of the same step
(100 channels, 5 new versions), the ``redis + pg`` floor, and ``bench_langgraph.py``'s
puts on a long thread (10 channels of about 1 KB, 2 changed per put, on a thread of 100
checkpoints) by each saver (amber's hot copies written once the burst ends, as a burst's
natively are, about once a second: under valgrind each put would be followed by a pause
long enough to write one). ``--native`` runs the same operations without valgrind and
prints no counts: the script's own check.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; the child creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Engines, Payload, engines, header, print_table

OPS = 200
WARMUP = 50
SAVE = "save, 100 keys, 5 changed"
LONG = "put, thread of 100 checkpoints, 2 of 10 channels changed"
SIDES = (
    (SAVE, "amber", "amber_save"),
    (SAVE, "LangGraph", "lg_save"),
    (SAVE, "redis + pg floor", "floor_save"),
    (LONG, "amber", "amber_put"),
    (LONG, "LangGraph", "lg_put"),
)
"""(operation, side, the child's name for it), in the order the child runs them."""


# -- the child: one process, every operation ------------------------------------------
def _ops(eng: Engines, name: str, closing: contextlib.ExitStack) -> Callable[[int], None]:
    """The operation ``name``, set up, as a function of its iteration; what it opens is
    closed by ``closing`` (before the servers stop: an AmberSaver's hot copies left to
    write are written while Redis is up)."""
    import bench_langgraph as lgb
    import bench_save as sb
    from langgraph.checkpoint.postgres import PostgresSaver

    from amber.langgraph import AmberSaver

    if name.endswith("_save"):
        payload = Payload.make(seed=1)
        steps = [payload.change(sb.CHANGED) for _ in range(64)]
        side: sb.AmberSide | sb.LangGraphSide | sb.FloorSide
        if name == "amber_save":
            side = sb.AmberSide(eng.connect("checkpoint", tag="save"), payload)
        elif name == "lg_save":
            side = sb.LangGraphSide(_langgraph(eng, PostgresSaver, closing), payload)
        else:
            side = sb.FloorSide(eng.stack)
        return lambda i: side.step(steps[i % len(steps)])
    if name == "amber_put":
        saver = AmberSaver(eng.stack)
        closing.callback(saver.close)
        # natively a burst of puts writes the hot copy once a second (copies.MAX_DELAY_S):
        # under valgrind a put takes long enough for the writer's pause (QUIET_S) to pass
        # after each one, which would count a copy's write per put
        saver._core.hot.quiet_s = saver._core.hot.max_delay_s = 3600.0
    else:
        saver = _langgraph(eng, PostgresSaver, closing)
    rng = random.Random(4)
    thread = lgb.Thread(saver)
    thread.put(lgb.full_state(4, 1_000))
    for _ in range(99):
        thread.put({f"ch{c}": lgb.records(rng, 1_000) for c in rng.sample(range(10), 2)})
    changes = [
        {f"ch{c}": lgb.records(rng, 1_000) for c in rng.sample(range(10), 2)} for _ in range(64)
    ]
    return lambda i: thread.put(changes[i % len(changes)])


def _langgraph(eng: Engines, saver_class: Any, closing: contextlib.ExitStack) -> Any:
    """A PostgresSaver on the run's database, its tables made, open until ``closing``."""
    saver = closing.enter_context(saver_class.from_conn_string(eng.database_url))
    saver.setup()
    return saver


def _callgrind(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], capture_output=True, check=False)


def child(ops: int, warmup: int, counted: bool) -> None:
    """Each operation of :data:`SIDES`: warmed up, then ``ops`` counted (``counted``)."""
    with engines("bench-instructions") as eng, contextlib.ExitStack() as closing:
        for _, _, name in SIDES:
            op = _ops(eng, name, closing)
            for i in range(warmup):
                op(i)
            if counted:
                _callgrind("-z")
            for i in range(ops):
                op(warmup + i)
            if counted:
                _callgrind("-d", name)


# -- the parent: start the child, read its dumps ------------------------------------------
def counts(out_dir: Path) -> dict[str, int]:
    """Instructions of each dump in ``out_dir``, by the name it was dumped under."""
    found: dict[str, int] = {}
    for path in out_dir.glob("cg.out.*"):
        text = path.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: dump (\S+)$", text, re.M)  # callgrind_control -d
        summary = re.search(r"^summary: (\d+)$", text, re.M)  # the counted part's total
        if trigger and summary:
            found[trigger.group(1)] = int(summary.group(1))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 operations, 5 to warm up")
    parser.add_argument("--ops", type=int, default=None, help=f"operations counted ({OPS})")
    parser.add_argument("--native", action="store_true", help="no valgrind, no counts")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ops = args.ops or (10 if args.quick else OPS)
    warmup = 5 if args.quick else WARMUP
    if args.child:
        child(ops, warmup, counted=not args.native)
        return
    if not args.native and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("valgrind is not installed (apt-get install valgrind): nothing counted")
        return
    with engines("bench-instructions") as eng:
        header("bench_instructions: client instructions per operation, amber vs LangGraph",
               eng, {"counted": f"{ops} operations after {warmup}, the client process only",
                     "tool": "native (no counts)" if args.native
                     else "valgrind --tool=callgrind, callgrind_control -z / -d"})  # fmt: skip
        env = dict(os.environ, AMBER_REDIS_URL=eng.redis_url, AMBER_DATABASE_URL=eng.admin_url)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent.parent / "src"),
                                                          env.get("PYTHONPATH")]))  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="amber-callgrind-") as tmp:
            out = Path(tmp)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", f"--ops={ops}"]
            cmd += ["--quick"] if args.quick else []
            if args.native:
                cmd.append("--native")
            else:
                cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file="
                       + str(out / "cg.out.%p"), *cmd]  # fmt: skip
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"the counted process failed:\n{proc.stderr[-3000:]}")
            found = {} if args.native else counts(out)
    rows: list[tuple[str, ...] | str] = []
    for operation in (SAVE, LONG):
        rows.append(operation)
        sides = [(side, name) for op, side, name in SIDES if op == operation]
        peer = found.get(next(name for side, name in sides if side == "LangGraph"))
        for side, name in sides:
            n = found.get(name)
            per = None if n is None else n / ops
            ratio = "" if n is None or not peer else f"{n / peer:.2f}x"
            rows.append((side, "n/a" if per is None else f"{per:,.0f}", ratio))
    print()
    print_table(("side", "instructions / op", "vs LangGraph"), rows, right={1, 2})
    print()
    print("Instructions the client process ran per operation (callgrind's Ir), the same")
    print("in every run of the same code and inputs: the servers' work is not counted.")


if __name__ == "__main__":
    main()
