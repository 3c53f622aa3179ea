"""An application for worker processes under test: ``--app tests.runtime.workapp:app``.

Two function agents, each running ``STEPS`` durable steps. Every step first appends
``start <analysis> <agent> <step> <pid> <token>`` to the ledger file named by
``ctx.input["ledger"]`` (O_APPEND, one write: the line survives a SIGKILL right after
it), then sleeps ``ctx.input["sleep"]`` seconds (``ctx.input["first"]`` for the first
step, if given; times a factor between 0.5 and 1.5, so kills land at varied points; the
first step of the ``alpha`` agent instead holds the GIL ``ctx.input["busy"]`` seconds, if
given), writes its token to the agent's working memory, notes ``end ...`` with the same
words, and returns its value and the token; once ``ctx.step`` has returned (its record
committed) the agent notes ``acked ...``. With ``ctx.input["pay"]`` each agent ends with
an at-most-once ``pay`` step that takes an idempotency key (noted ``pay ...``); with
``ctx.input["memory"]`` its result says whether the memory holds each recorded step's
token (``memory_ok``). An agent returns the sum of its values, which depends only on the
analysis, the agent and the step, and the token of every step: the token in the result
says which start's result was recorded.

The agent names end with ``WORKAPP_TAG`` (from the environment, or ``make_app(tag)``):
a worker only claims analyses whose agents its app registers, so each test's workers
see only that test's analyses.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
import time
from collections.abc import Callable
from typing import Any

import amber
from amber.agents.base import current_agent
from tests.chaos.agents import ledger, note

STEPS = 3
KINDS = ("alpha", "beta")
DEFINITION = "pair"
TAG_VARIABLE = "WORKAPP_TAG"

__all__ = ["DEFINITION", "KINDS", "STEPS", "app", "expected", "ledger", "make_app", "value"]


def value(analysis_id: str, agent_type: str, step: int) -> int:
    """What step ``step`` of ``agent_type`` computes in an analysis: fixed by its names."""
    digest = hashlib.sha256(f"{analysis_id}:{agent_type}:{step}".encode()).hexdigest()
    return int(digest[:8], 16) % 1000


def expected(analysis_id: str, agent_type: str, steps: int = STEPS) -> int:
    """The total an uninterrupted run of the agent returns."""
    return sum(value(analysis_id, agent_type, i) for i in range(steps))


def hold_gil(seconds: float) -> None:
    """Spend ``seconds`` in one C call that never lets the GIL go (no other thread of the
    process runs meanwhile, the lease heartbeat included), as a native library might."""
    t0 = time.perf_counter()
    sum(range(100_000))
    per = max((time.perf_counter() - t0) / 100_000, 1e-9)
    sum(range(int(seconds / per)))


def work(
    path: str, analysis_id: str, agent_type: str, step: int, sleep: float, busy: float = 0.0
) -> dict[str, Any]:
    """One step: note its start in the ledger, take a little time (``busy``: holding the
    GIL), return value and token."""
    token = secrets.token_hex(6)
    note(path, f"start {analysis_id} {agent_type} s{step} {os.getpid()} {token}")
    if busy > 0:
        hold_gil(busy)
    elif sleep > 0:
        time.sleep(sleep * random.uniform(0.5, 1.5))
    agent = current_agent.get()
    if agent is not None:  # after the wait: a process frozen in it writes when it wakes
        agent.memory.set(f"token:s{step}", token)
    note(path, f"end {analysis_id} {agent_type} s{step} {os.getpid()} {token}")
    return {"value": value(analysis_id, agent_type, step), "token": token}


def pay(path: str, analysis_id: str, agent_type: str, idempotency_key: str) -> str:
    """An at-most-once call to a payment provider, which deduplicates by the key: noted
    ``pay <analysis> <agent> <key> <pid>`` before it goes out."""
    note(path, f"pay {analysis_id} {agent_type} {idempotency_key} {os.getpid()}")
    time.sleep(0.05)
    return idempotency_key


def _agent(agent_type: str) -> Callable[[Any], dict[str, Any]]:
    def run(ctx: Any) -> dict[str, Any]:
        total, tokens = 0, []
        path, sleep = ctx.input["ledger"], float(ctx.input.get("sleep", 0.0))
        first = float(ctx.input.get("first", sleep))
        busy = float(ctx.input.get("busy", 0.0)) if KINDS[0] in agent_type else 0.0
        for i in range(STEPS):
            pause = first if i == 0 else sleep
            held = busy if i == 0 else 0.0
            got = ctx.step(f"s{i}", work, path, ctx.analysis_id, agent_type, i, pause, held)
            # the step returned: its record is acknowledged (committed in PostgreSQL)
            note(path, f"acked {ctx.analysis_id} {agent_type} s{i} {os.getpid()} {got['token']}")
            total += int(got["value"])
            tokens.append(str(got["token"]))
        result: dict[str, Any] = {"total": total, "tokens": tokens}
        if ctx.input.get("pay"):
            result["paid"] = ctx.step(
                "pay", pay, path, ctx.analysis_id, agent_type, at_most_once=True
            )
        if ctx.input.get("memory"):  # the memory holds each recorded step's own token
            held = [ctx.memory.get(f"token:s{i}") for i in range(STEPS)]
            result["memory_ok"] = [t.decode() if t else None for t in held] == tokens
        return result

    run.__name__ = f"run_{agent_type}"
    return run


def make_app(tag: str) -> amber.App:
    """The app whose agents are ``wk_alpha_<tag>`` and ``wk_beta_<tag>``, defining ``pair``."""
    app = amber.App(f"workapp_{tag}")
    names = []
    for kind in KINDS:
        agent_type = f"wk_{kind}_{tag}"
        app.agent(_agent(agent_type), name=agent_type, steps=[f"s{i}" for i in range(STEPS)])
        names.append(agent_type)
    app.analysis(DEFINITION, agents=names)
    return app


app = make_app(os.environ.get(TAG_VARIABLE, "default"))
