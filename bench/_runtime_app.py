"""The application ``bench_runtime.py`` runs in its worker processes (``_runtime_app:app``).

Three function agents of ``STEPS`` durable steps each. A step appends
``start <analysis> <agent> <step> <pid> <token>`` to the ledger (``ctx.input["ledger"]``,
O_APPEND, one write, so it survives a SIGKILL), sleeps ``ctx.input["step_ms"]`` and
returns its value and token. The agent times each ``ctx.step`` call that ran its
function and appends ``time <total us> <function us>``: the difference is amber's own
time for the step (checking the run may go on, recording the result in a checkpoint).
The agents return the sum of their values and the token of every step.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

import amber

STEPS = 5
AGENTS = ("bench_rt_fetch", "bench_rt_model", "bench_rt_write")
DEFINITION = "bench_runtime"


def note(path: str, line: str) -> None:
    """Append one line to the ledger; durable against the writer's SIGKILL."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def value(analysis_id: str, agent_type: str, step: int) -> int:
    """What a step computes: fixed by its names (so a rerun gives the same total)."""
    return (sum(analysis_id.encode()) * 31 + sum(agent_type.encode()) * 7 + step) % 1000


def expected(analysis_id: str, agent_type: str) -> int:
    """The total an uninterrupted run of the agent returns."""
    return sum(value(analysis_id, agent_type, i) for i in range(STEPS))


def work(path: str, analysis_id: str, agent_type: str, step: int, ms: float) -> dict[str, Any]:
    """One step: note its start, take ``ms`` milliseconds, return value, token and time."""
    t0 = time.perf_counter()
    token = secrets.token_hex(6)
    note(path, f"start {analysis_id} {agent_type} s{step} {os.getpid()} {token}")
    if ms > 0:
        time.sleep(ms / 1000)
    spent = time.perf_counter() - t0
    return {"value": value(analysis_id, agent_type, step), "token": token, "us": spent * 1e6}


def _agent(agent_type: str) -> Any:
    def run(ctx: Any) -> dict[str, Any]:
        path, ms = ctx.input["ledger"], float(ctx.input.get("step_ms", 0))
        total, tokens = 0, []
        for i in range(STEPS):
            done = f"s{i}" in ctx.completed_subtasks
            t0 = time.perf_counter()
            got = ctx.step(f"s{i}", work, path, ctx.analysis_id, agent_type, i, ms)
            spent = (time.perf_counter() - t0) * 1e6
            if not done:
                note(path, f"time {spent:.0f} {got['us']:.0f}")
            total += int(got["value"])
            tokens.append(str(got["token"]))
        return {"total": total, "tokens": tokens}

    run.__name__ = agent_type
    return run


app = amber.App("bench_runtime")
for _name in AGENTS:
    app.agent(_agent(_name), name=_name, steps=[f"s{i}" for i in range(STEPS)])
app.analysis(DEFINITION, agents=list(AGENTS))
