"""Hooks the core calls at the moments an operator watches; nothing listens by default.

The core stays free of any metrics library: it calls :func:`emit` (or :func:`timed`)
with an event name, a value and a few labels, and each registered sink (a plain
function) gets the call. ``amber.web.metrics`` binds the events to Prometheus
metrics; a test or a user can add their own sink. With no sink, an event costs one
list check. :func:`span` opens an OpenTelemetry span when ``opentelemetry`` is
importable, and does nothing otherwise.

Events (value; labels):

- ``checkpoint.save`` (seconds; ``mode``): a checkpoint committed
- ``checkpoint.restore`` (seconds; ``mode``): a checkpoint read back
- ``recovery`` (1; ``path``: ``l1``, ``secondary``, ``postgresql``, ``empty`` (nothing
  stored yet: a new agent) or ``failed``)
- ``verification.failed`` (1; ``tier``): a stored snapshot failed its check
- ``wal.fsync`` (seconds): one fsync of a log segment or its directory
- ``pause`` / ``resume`` (1; ``reason``)
- ``lease.takeover`` (1): a run took over an analysis whose runner died
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar, cast

log = logging.getLogger("amber.observe")

CHECKPOINT_SAVE = "checkpoint.save"
CHECKPOINT_RESTORE = "checkpoint.restore"
RECOVERY = "recovery"
VERIFICATION_FAILED = "verification.failed"
WAL_FSYNC = "wal.fsync"
PAUSE = "pause"
RESUME = "resume"
TAKEOVER = "lease.takeover"

RECOVERY_PATHS = {
    "l1_existing": "l1",
    "redis_secondary": "secondary",
    "postgresql_checkpoint": "postgresql",
    "empty": "empty",
    "checkpoint_empty": "empty",
    "rolled_back": "rolled_back",
    "refused": "refused",
}
"""A recovery report's ``path`` as the ``recovery`` event names it (else ``failed``)."""

Sink = Callable[[str, float, Mapping[str, str]], None]

_sinks: list[Sink] = []
_lock = threading.Lock()


def add_sink(sink: Sink) -> Callable[[], None]:
    """Call ``sink(event, value, labels)`` on every event; returns a function removing it."""
    with _lock:
        _sinks.append(sink)

    def remove() -> None:
        with _lock, contextlib.suppress(ValueError):
            _sinks.remove(sink)

    return remove


def emit(event: str, value: float = 1.0, **labels: str) -> None:
    """Hand an event to every sink; a sink that raises is logged, never propagated."""
    if not _sinks:
        return
    for sink in list(_sinks):
        try:
            sink(event, value, labels)
        except Exception:
            log.exception("a sink failed on %s", event)


@contextlib.contextmanager
def timed(event: str, **labels: str) -> Iterator[None]:
    """Emit the seconds the block took, when it ends without an exception."""
    t0 = time.perf_counter()
    yield
    emit(event, time.perf_counter() - t0, **labels)


def recovery_path(path: str) -> str:
    """The ``recovery`` label of a recovery report's path."""
    return RECOVERY_PATHS.get(path, "failed")


try:  # optional: spans only when OpenTelemetry is installed
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - depends on the environment
    _trace = None  # type: ignore[assignment]

_tracer: Any = None
"""amber's tracer, once the application has set a tracer provider."""


def _live_tracer() -> Any:
    """amber's tracer once a tracer provider is set (by the application or by
    ``OTEL_PYTHON_TRACER_PROVIDER``), else None: until then a span would go through
    OpenTelemetry's proxy to nothing, at a cost on every step and save."""
    global _tracer
    if (
        _tracer is None
        and _trace is not None
        and not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)
    ):
        _tracer = _trace.get_tracer("amber")
    return _tracer


@contextlib.contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[None]:
    """An OpenTelemetry span named ``name`` around the block (a no-op without it, or
    until a tracer provider is set)."""
    tracer = _live_tracer()
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(name, attributes=attributes):
        yield


F = TypeVar("F", bound=Callable[..., Any])


def traced(name: str) -> Callable[[F], F]:
    """Decorate a function to run inside :func:`span` ``name``."""

    def wrap(fn: F) -> F:
        if _trace is None:
            return fn

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            tracer = _live_tracer()
            if tracer is None:
                return fn(*args, **kwargs)
            with tracer.start_as_current_span(name):
                return fn(*args, **kwargs)

        return cast(F, inner)

    return wrap
