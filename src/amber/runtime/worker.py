"""``amber worker``: a process that claims queued analyses of its app and runs them.

Any number of workers on any number of machines point at the same two URLs. Each one
claims work with ``FOR UPDATE SKIP LOCKED`` (``Leases.claim_next``), runs up to
``concurrency`` analyses at once, and holds each under a lease its heartbeat renews. A
worker that dies loses its liveness lock with its connection, and another worker takes
its analyses over at its next poll: it recovers each agent's memory and continues from
the last checkpoint. On SIGTERM a worker stops claiming, lets each run reach its next
step boundary (every finished step is already checkpointed), hands the leases back and
exits. A worker that loses PostgreSQL or Redis keeps polling and resumes when they return.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from amber import defaults
from amber.errors import (
    AmberError,
    AnalysisStateError,
    CodeChanged,
    Fenced,
    MigrationError,
    StoreUnavailable,
    UnknownAgent,
    VersionTooNew,
)
from amber.keys import runner_id
from amber.runtime.leases import Claim

if TYPE_CHECKING:
    from amber.runtime.app import App
    from amber.stack import Stack

log = logging.getLogger("amber.worker")

BACKOFF_FIRST = 1.0
"""Seconds a worker leaves an analysis alone after a run of it failed on an error."""

BACKOFF_MAX = 60.0
"""Longest wait: the backoff doubles with each failed run of the same analysis."""


@dataclass
class WorkerStats:
    """What a worker has done since it started."""

    claimed: int = 0
    taken_over: int = 0
    finished: int = 0
    """Runs that ended (completed, paused, failed or handed back)."""
    errors: int = 0
    refused: list[str] = field(default_factory=list)
    """Analyses this worker will not run (their code changed): left for a person."""


def banner(name: str, app: str, concurrency: int) -> str:
    """The first line ``amber worker`` prints: its id, app and concurrency."""
    return f"worker {name}: app {app}, concurrency {concurrency}"


def name_in_banner(output: str) -> str | None:
    """The worker id (``host:pid:token``) in a worker's output, once it printed its
    :func:`banner`; None before."""
    for line in output.splitlines():
        if line.startswith("worker ") and ": app " in line:
            return line.split()[1].rstrip(":")
    return None


class Worker:
    """Claims and runs the queued analyses of ``app``, ``concurrency`` at a time."""

    def __init__(self, stack: Stack, app: App, concurrency: int | None = None) -> None:
        self.stack = stack
        self.app = app
        self.concurrency = concurrency or stack.settings.worker_concurrency
        if self.concurrency < 1:
            raise AmberError("concurrency must be at least 1", concurrency=concurrency)
        self.name = runner_id()
        """This worker's id (``host:pid:token``); each run's lease owner starts with it."""
        self.coordinator = app.coordinator(stack)
        self.shutdown = threading.Event()
        """Set by :meth:`stop`: runs hand their leases back at their next step."""
        self.stats = WorkerStats()
        self._wake = threading.Event()
        self._running: dict[str, Future[None]] = {}
        self._backoff: dict[str, tuple[float, float]] = {}
        """Analyses whose last run failed on an error: (left alone until, the wait)."""
        self._lock = threading.Lock()
        self._told: set[str] = set()
        """Analyses this worker said it cannot run (each is said once)."""

    def run(self, until: Callable[[], bool] | None = None) -> WorkerStats:
        """Claim and run work until :meth:`stop` (or ``until()`` is true); then hand back."""
        poll = self.stack.settings.worker_poll
        leases, reviews = self.stack.analyses.leases, self.coordinator.reviews
        log.info("%s", banner(self.name, self.app.name, self.concurrency))
        next_expiry = next_seen = 0.0
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="amber-run") as pool:
            while not self.shutdown.is_set():
                claims: list[Claim] = []
                try:
                    if time.monotonic() >= next_seen:
                        self._say_alive()
                        next_seen = time.monotonic() + defaults.WORKER_SEEN_EVERY
                    if time.monotonic() >= next_expiry:  # once a poll, not at every claim
                        reviews.expire_due()
                        next_expiry = time.monotonic() + poll
                    with self._lock:
                        free = self.concurrency - len(self._running)
                        # a run of ours whose lease lapsed (the database was away longer
                        # than a lease) may still be inside a step: never claim it again
                        # beside it, under the same owner the fence cannot tell apart
                        now = time.monotonic()
                        waiting = [a for a, (until, _) in self._backoff.items() if until > now]
                        skip = [*self.stats.refused, *self._running, *waiting]
                    claims = leases.claim_next(self.name, free, self.app.names(), skip)
                except StoreUnavailable as exc:
                    log.warning("worker %s: cannot reach a server, retrying: %s", self.name, exc)
                for claim in claims:
                    with self._lock:
                        self._running[claim.analysis_id] = pool.submit(self._run_one, claim)
                if until is not None and until():
                    break
                if not claims:
                    self._wake.wait(poll)
                self._wake.clear()
            self.shutdown.set()
        with contextlib.suppress(StoreUnavailable):  # else its row lapses by itself
            self.stack.analyses.worker_gone(self.name)
        return self.stats

    def _say_alive(self) -> None:
        """Note this worker and the agent names it runs; log once each queued analysis it
        cannot run (another worker's app may register what this one lacks)."""
        known = self.app.names()
        self.stack.analyses.worker_seen(self.name, self.app.name, known)
        for aid, lacking in self.stack.analyses.unrunnable(known):
            if aid in self._told:
                continue
            self._told.add(aid)
            log.warning(
                "worker %s leaves analysis %s to another worker: app %r registers no agent %s",
                self.name,
                aid,
                self.app.name,
                ", ".join(repr(x) for x in lacking),
            )

    def _run_one(self, claim: Claim) -> None:
        aid = claim.analysis_id
        with self._lock:
            self.stats.claimed += 1
            self.stats.taken_over += claim.taken_over
        if claim.stuck:
            log.warning(
                "worker %s took analysis %s over from %s: its process is alive but renewed"
                " no lease for %.0f s (a step that does not return, or a frozen process);"
                " that run is fenced off",
                self.name,
                aid,
                claim.prior,
                self.stack.analyses.leases.stuck_seconds,
            )
        try:
            self.coordinator.run_claimed(claim, self.shutdown)
            with self._lock:
                self._backoff.pop(aid, None)
        except Fenced as exc:  # another run holds it now: this one changed nothing more
            log.warning("worker %s: run of %s stopped, fenced off: %s", self.name, aid, exc)
        except AnalysisStateError:
            pass  # paused or finished between the claim and the run: nothing to do
        except (CodeChanged, MigrationError, VersionTooNew, UnknownAgent) as exc:
            with self._lock:
                self.stats.refused.append(aid)
            log.error("worker %s refuses analysis %s: %s", self.name, aid, exc)
            self._note(aid, "refused", error=str(exc))
        except (AmberError, OSError) as exc:
            self._back_off(aid, exc)
        except Exception as exc:
            log.exception("worker %s: run of %s failed", self.name, aid)
            self._back_off(aid, exc, logged=True)
        finally:
            with contextlib.suppress(StoreUnavailable):  # else the lease lapses by itself
                self.stack.analyses.leases.release(aid, claim.owner)
            with self._lock:
                self._running.pop(aid, None)
                self.stats.finished += 1
            self._wake.set()

    def _back_off(self, aid: str, exc: BaseException, logged: bool = False) -> None:
        """Leave an analysis whose run failed alone for a while, doubling the wait each
        time it fails again: an error that will not change by itself (a lock a frozen
        process holds, a write that always fails) costs a claim a minute, not a loop.
        Said once per streak, on the timeline and in the log."""
        with self._lock:
            self.stats.errors += 1
            _, before = self._backoff.get(aid, (0.0, 0.0))
            wait = min(before * 2, BACKOFF_MAX) if before else BACKOFF_FIRST
            self._backoff[aid] = (time.monotonic() + wait, wait)
        if before:
            log.debug(
                "worker %s: run of %s failed again (next try in %.0f s)", self.name, aid, wait
            )
            return
        if not logged:
            log.warning(
                "worker %s: run of %s stopped: %s (left alone for %.0f s, then longer while"
                " it keeps failing)",
                self.name,
                aid,
                exc,
                wait,
            )
        self._note(aid, "backing_off", error=f"{type(exc).__name__}: {exc}"[:500])

    def _note(self, aid: str, kind: str, **detail: Any) -> None:
        with contextlib.suppress(StoreUnavailable):
            self.stack.analyses.event(aid, kind, self.name, **detail)

    def stop(self) -> None:
        """Stop claiming; runs hand their leases back at their next step boundary."""
        self.shutdown.set()
        self._wake.set()

    def running(self) -> list[str]:
        """The analyses this worker is running now."""
        with self._lock:
            return list(self._running)

    def install_signals(self) -> None:
        """SIGTERM and SIGINT stop the worker gracefully; a second one exits at once."""

        def handler(signum: int, frame: FrameType | None) -> None:
            if self.shutdown.is_set():
                raise SystemExit(128 + signum)
            log.info("worker %s: signal %d, handing work back", self.name, signum)
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
