"""One chaos child: run, resume or pause one analysis, writing what it does to the ledger.

The engine starts children ahead of need (``python -m tests.chaos.worker``): each
imports amber and waits. Its first stdin line is its order (JSON); it connects,
installs its hooks and prints ``ready``. The second line, ``go``, starts the work;
it prints ``done <json>`` (or ``error <json>``) at the end. Whatever the
invariants need goes to the analysis's ledger before it can be lost: each market
call before it is served, each subtask start, the phase it enters.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

import amber
from amber.errors import AnalysisStateError
from amber.examples import MarketDataClient
from amber.keys import call_key
from tests.chaos.ledger import (
    CACHEKILL,
    CALL,
    END,
    ERROR,
    GO,
    PHASE,
    START,
    Ledger,
)

TICKER = "AAPL"
ACTIONS = ("run", "resume", "pause")


@dataclass(frozen=True)
class Order:
    """What one child does, and where."""

    action: str
    """``run`` (``coordinator.run``), ``resume`` (``pause_manager.resume``) or ``pause``."""
    analysis_id: str
    mode: str
    """Durability mode of the analysis: hybrid, checkpoint or wal."""
    redis_url: str
    database_url: str
    data_dir: str
    prefix: str
    ledger: str
    cache_kill_at: int = 0
    """Kill this process at the n-th checkpoint, around its PostgreSQL commit (see
    ``kill_after_commit``; 0: never)."""

    def to_json(self) -> str:
        """One line."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str) -> Order:
        """Parse ``to_json``'s line."""
        return cls(**json.loads(line))


def connect(order: Order) -> amber.Stack:
    """A stack in the analysis's durability mode (wal: every log write fsync'd)."""
    settings: dict[str, Any] = {"durability": order.mode}
    if order.mode == "wal":
        settings["wal_fsync"] = "always"
    return amber.connect(
        order.redis_url, order.database_url, order.data_dir, order.prefix, **settings
    )


class LedgerMarket(MarketDataClient):
    """The market-data client, with every call written to the ledger before it is served."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self._ledger = ledger

    def fetch(self, provider: str, endpoint: str, **params: Any) -> Any:
        """Log the call and the thread making it (each agent runs on its own), then make it."""
        self._ledger.write(CALL, call_key(provider, endpoint, params), str(threading.get_ident()))
        return super().fetch(provider, endpoint, **params)


def install(stack: amber.Stack, order: Order, ledger: Ledger) -> None:
    """The ledger market, the subtask-start log and the kill after a commit."""
    co = stack.coordinator
    co.market = LedgerMarket(ledger)

    def on_start(agent: Any, subtask: str) -> None:
        now = f"{time.time():.6f}"
        ledger.write(
            START,
            agent.analysis_id,
            agent.agent_type,
            subtask,
            agent.checkpoint_seq,
            agent.runner,
            now,
            str(threading.get_ident()),
        )

    co.on_subtask_start = on_start
    if order.cache_kill_at > 0:
        kill_after_commit(stack, order.cache_kill_at, ledger)


def kill_after_commit(stack: amber.Stack, n: int, ledger: Ledger) -> None:
    """SIGKILL this process in its n-th checkpoint, around the PostgreSQL commit. An odd
    ``n`` dies right after it (``AgentCheckpointer._cache``, called once per checkpoint
    after the commit): the Redis copies' reply unread, and their slow-path write, when
    they needed one, not made. An even ``n`` dies as the copies are built
    (``_cache_commands``): where the row holds the memory, once the insert went out, so
    PostgreSQL may commit it or not and Redis gets nothing of that save; in ``hybrid``,
    before the insert is sent, so nothing of that save is committed."""
    cp = stack.checkpointer
    name = "_cache" if n % 2 else "_cache_commands"
    real = getattr(cp, name)
    seen = 0

    def or_die(*args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        seen += 1
        if seen == n:
            ledger.write(CACHEKILL, seen)
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(cp, name, or_die)


def act(stack: amber.Stack, order: Order, ledger: Ledger) -> dict[str, Any]:
    """Do the order's work; returns its outcome for the engine."""
    aid = order.analysis_id
    by = f"chaos-{os.getpid()}"
    ledger.write(PHASE, order.action)
    if order.action == "run":
        results = stack.coordinator.run(aid)
        return {"statuses": {t: r.status for t, r in results.items()}}
    if order.action == "resume":
        rep = stack.pause_manager.resume(aid, by=by)
        return {
            "resumed": rep.resumed,
            "taken_over": rep.taken_over,
            "message": rep.message,
            "statuses": {t: r.status for t, r in rep.results.items()},
        }
    try:
        pause = stack.pause_manager.pause(aid, "chaos", by=by)
    except AnalysisStateError as exc:  # finished before the pause got there
        return {"refused": str(exc.context.get("status", exc))}
    return {"pending": pause.pending, "already": pause.already_paused}


def main() -> int:
    """Wait for an order, connect, wait for ``go``, work; 0 when the work returned."""
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the engine closed its pool
    order = Order.from_json(line)
    if order.action not in ACTIONS:
        raise ValueError(f"unknown action {order.action!r}")
    ledger = Ledger(order.ledger)
    stack: amber.Stack | None = None
    try:
        stack = connect(order)
        install(stack, order, ledger)
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return 0
        ledger.write(GO, order.action, order.mode)
        outcome = act(stack, order, ledger)
        ledger.write(END, order.action, json.dumps(outcome, sort_keys=True))
        print("done " + json.dumps(outcome), flush=True)
        return 0
    except Exception as exc:
        ledger.write(ERROR, type(exc).__name__, str(exc)[:300])
        traceback.print_exc()
        print("error " + json.dumps({"type": type(exc).__name__, "message": str(exc)}), flush=True)
        return 3
    finally:
        if stack is not None:
            stack.close()
        ledger.close()


if __name__ == "__main__":
    sys.exit(main())
