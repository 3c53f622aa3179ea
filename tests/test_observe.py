"""``amber.observe``: the core reports checkpoints, recoveries, pauses, resumes and fsyncs
to every sink, and a failing sink never breaks the work."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import amber
from amber import observe
from amber.examples import ANALYSTS, MarketDataClient
from amber.pause import PauseManager
from amber.wal import WriteAheadLog

Seen = list[tuple[str, float, dict[str, str]]]


@pytest.fixture
def seen() -> Iterator[Seen]:
    events: Seen = []

    def sink(event: str, value: float, labels: Mapping[str, str]) -> None:
        events.append((event, value, dict(labels)))

    remove = observe.add_sink(sink)
    yield events
    remove()


def _kinds(seen: Seen, event: str) -> list[dict[str, str]]:
    return [labels for e, _, labels in seen if e == event]


def test_a_paused_and_resumed_analysis_reports_each_moment(stack: amber.Stack, seen: Seen) -> None:
    market = MarketDataClient(quotas={"koyfin": 15})
    co = stack.coordinator.using(market)
    aid = co.start_analysis("AAPL", ANALYSTS)
    co.run(aid)
    assert _kinds(seen, observe.PAUSE) == [{"reason": "quota_exhausted"}]
    mode = stack.settings.durability.value
    saves = [(v, labels) for e, v, labels in seen if e == observe.CHECKPOINT_SAVE]
    assert saves and all(v >= 0 and labels == {"mode": mode} for v, labels in saves)
    assert {"path": "empty"} in _kinds(seen, observe.RECOVERY)  # new agents: nothing stored
    seen.clear()

    market.set_quota("koyfin", None)
    report = PauseManager(stack.analyses, co).resume(aid, "test")
    assert report.resumed and stack.analyses.get(aid).status == "completed"
    assert _kinds(seen, observe.RESUME) == [{"reason": "quota_exhausted"}]
    assert _kinds(seen, observe.RECOVERY) == [{"path": "l1"}] * len(ANALYSTS)
    assert _kinds(seen, observe.CHECKPOINT_RESTORE) == [{"mode": mode}] * len(ANALYSTS)


def test_a_sink_that_raises_is_logged_and_the_others_still_hear(seen: Seen) -> None:
    def broken(event: str, value: float, labels: Mapping[str, str]) -> None:
        raise RuntimeError("sink down")

    remove = observe.add_sink(broken)
    try:
        observe.emit(observe.TAKEOVER)
    finally:
        remove()
    remove()  # removing twice is harmless
    assert [e for e, _, _ in seen] == [observe.TAKEOVER]


def test_wal_fsyncs_are_timed(tmp_path: Path, seen: Seen) -> None:
    with WriteAheadLog(tmp_path / "log", "always") as log:
        log.append("set", {"k": 1})
    fsyncs = [v for e, v, _ in seen if e == observe.WAL_FSYNC]
    assert fsyncs and all(v >= 0 for v in fsyncs)


def test_recovery_paths_are_named_for_metrics() -> None:
    assert observe.recovery_path("l1_existing") == "l1"
    assert observe.recovery_path("redis_secondary") == "secondary"
    assert observe.recovery_path("postgresql_checkpoint") == "postgresql"
    assert observe.recovery_path("something else") == "failed"


def test_span_is_a_context_manager_with_or_without_opentelemetry() -> None:
    with observe.span("amber.test", key="k"):
        pass
    assert observe.traced("amber.test")(lambda: 3)() == 3


_SPANS_AFTER_A_PROVIDER = """
import contextlib
from opentelemetry import trace
from amber import observe

names = []

class Tracer(trace.Tracer):
    def start_span(self, name, *args, **kwargs):
        names.append(name)
        return trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)

    @contextlib.contextmanager
    def start_as_current_span(self, name, *args, **kwargs):
        yield self.start_span(name)

class Provider(trace.TracerProvider):
    def get_tracer(self, *args, **kwargs):
        return Tracer()

saved = observe.traced("amber.before")(lambda: 1)
with observe.span("amber.none"):  # no provider yet: no span, and no cost of one
    saved()
trace.set_tracer_provider(Provider())  # the application sets one after importing amber
with observe.span("amber.outer", key="k"):
    saved()
print(",".join(names))
"""


def test_spans_start_once_the_application_sets_a_tracer_provider() -> None:
    pytest.importorskip("opentelemetry.trace")
    out = subprocess.run(
        [sys.executable, "-c", _SPANS_AFTER_A_PROVIDER],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "amber.outer,amber.before"
