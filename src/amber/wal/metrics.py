"""The metrics hook: WAL, checkpoint and recovery events, to a callback of your choice.

Events and their fields:

* ``wal.appended`` — ``entry_count`` (entries written since the log was opened),
  ``batch_size`` (entries in this write);
* ``checkpoint.created`` — ``duration_ms``, ``size_bytes`` (compressed),
  ``uncompressed_bytes``, ``compression_ratio`` (uncompressed / compressed),
  ``wal_seq``;
* ``recovery.completed`` — ``duration_ms``, ``wal_entries_replayed``,
  ``checkpoint_seq``, ``fallbacks`` (corrupt checkpoints skipped).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

logger = logging.getLogger("amber.wal")

Fields = Mapping[str, float | int | str]
"""The values of one event, by field name."""


class Metrics(Protocol):
    """Receives one call per event; must be cheap and must not raise."""

    def on_event(self, name: str, fields: Fields) -> None:
        """Record the event ``name`` with its ``fields``."""


class NullMetrics:
    """The default hook: does nothing."""

    def on_event(self, name: str, fields: Fields) -> None:
        """Ignore the event."""


NULL_METRICS = NullMetrics()


def emit(metrics: Metrics, name: str, fields: Fields) -> None:
    """Send an event to the hook; a hook that raises is logged, never breaks the caller."""
    try:
        metrics.on_event(name, fields)
    except Exception:
        logger.exception("metrics hook failed on %s", name)


@dataclass
class RecordingMetrics:
    """Keeps every event in memory, in order (for tests and the benchmark)."""

    events: list[tuple[str, Fields]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def on_event(self, name: str, fields: Fields) -> None:
        """Append ``(name, fields)`` to ``events``."""
        with self._lock:
            self.events.append((name, dict(fields)))

    def named(self, name: str) -> list[Fields]:
        """The fields of every event called ``name``."""
        with self._lock:
            return [f for n, f in self.events if n == name]
