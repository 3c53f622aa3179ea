"""``/metrics``: amber's events (``amber.observe``) as Prometheus metrics.

Counters and histograms are fed by the hooks the core calls in this process (the
server, and its worker with ``--worker``); the gauges (queue depth, in-doubt steps,
analyses by status) are read from PostgreSQL at each scrape, so they speak for every
process. A pause reason becomes a label only when it is a short word (``quota_exhausted``,
``awaiting_review``, ``manual``); any other reason is counted as ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from amber import observe

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from amber.stack import Stack

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
REASON = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
REASONS_MAX = 32


class _Gauges(Collector):
    """Gauges read from PostgreSQL at scrape time."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    def collect(self) -> Iterator[Metric]:
        queued = GaugeMetricFamily(
            "amber_queue_depth", "Running analyses no live run holds (waiting for a worker)."
        )
        queued.add_metric([], self.stack.analyses.queued())
        yield queued
        doubt = GaugeMetricFamily(
            "amber_steps_in_doubt", "At-most-once steps started and never recorded."
        )
        doubt.add_metric([], len(self.stack.intents.in_doubt(None, 10_000)))
        yield doubt


class Metrics:
    """A registry of amber's metrics, fed by ``amber.observe`` while it is attached."""

    def __init__(self, stack: Stack) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.save = Histogram(
            "amber_checkpoint_save_seconds",
            "Checkpoint save latency (committed in PostgreSQL), by durability mode.",
            ["mode"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.restore = Histogram(
            "amber_checkpoint_restore_seconds",
            "Checkpoint restore latency, by durability mode.",
            ["mode"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.recovery = Counter(
            "amber_recoveries", "Working-memory recoveries by the tier used.", ["path"], registry=r
        )
        for path in ("l1", "secondary", "postgresql", "empty", "rolled_back", "refused", "failed"):
            self.recovery.labels(path)
        self.verify = Counter(
            "amber_verification_failures",
            "Stored snapshots that failed verification, by tier.",
            ["tier"],
            registry=r,
        )
        self.fsync = Histogram(
            "amber_wal_fsync_seconds",
            "fsync latency of log segments and checkpoint files.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.pauses = Counter("amber_pauses", "Analyses paused, by reason.", ["reason"], registry=r)
        self.resumes = Counter(
            "amber_resumes",
            "Analyses resumed, by the reason of their pause.",
            ["reason"],
            registry=r,
        )
        self.takeovers = Counter(
            "amber_lease_takeovers", "Analyses taken over from a run that died.", registry=r
        )
        r.register(_Gauges(stack))
        self._reasons: set[str] = set()
        self._detach: Callable[[], None] | None = None

    def _reason(self, reason: str) -> str:
        if reason in self._reasons:
            return reason
        if REASON.match(reason) and len(self._reasons) < REASONS_MAX:
            self._reasons.add(reason)
            return reason
        return "other"

    def on_event(self, event: str, value: float, labels: Mapping[str, str]) -> None:
        """The ``amber.observe`` sink."""
        if event == observe.CHECKPOINT_SAVE:
            self.save.labels(labels.get("mode", "")).observe(value)
        elif event == observe.CHECKPOINT_RESTORE:
            self.restore.labels(labels.get("mode", "")).observe(value)
        elif event == observe.RECOVERY:
            self.recovery.labels(labels.get("path", "failed")).inc(value)
        elif event == observe.VERIFICATION_FAILED:
            self.verify.labels(labels.get("tier", "")).inc(value)
        elif event == observe.WAL_FSYNC:
            self.fsync.observe(value)
        elif event == observe.PAUSE:
            self.pauses.labels(self._reason(labels.get("reason", ""))).inc(value)
        elif event == observe.RESUME:
            self.resumes.labels(self._reason(labels.get("reason", ""))).inc(value)
        elif event == observe.TAKEOVER:
            self.takeovers.inc(value)

    def attach(self) -> None:
        """Start counting this process's events."""
        if self._detach is None:
            self._detach = observe.add_sink(self.on_event)

    def detach(self) -> None:
        """Stop counting."""
        if self._detach is not None:
            self._detach()
            self._detach = None

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
