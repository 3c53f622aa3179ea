"""Copies of each namespace's newest checkpoint held in this process, and the Redis hot
copies written behind the puts."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from amber.langgraph.records import Blob, Body
from amber.lru import BytesLRU

log = logging.getLogger("amber.langgraph")


@dataclass(frozen=True, slots=True)
class Copy:
    """A namespace's newest checkpoint as stored: its row's ``seq``, body and blobs."""

    seq: int
    body: Body
    blobs: dict[str, Blob]
    """By channel."""

    def nbytes(self) -> int:
        """Bytes it holds (for the cache's bound)."""
        return len(self.body.data) + sum(b.nbytes for b in self.blobs.values())


class CopyCache:
    """The newest checkpoint of each namespace this process wrote or read, bounded by bytes
    (least recently used out first). A read uses it, like the Redis copy, only when
    PostgreSQL names its ``seq``; a put takes its unchanged channels from it instead of
    serializing them again."""

    def __init__(self, max_bytes: int) -> None:
        self._copies: BytesLRU[tuple[str, str], Copy] = BytesLRU(max_bytes, max_bytes // 4)

    def get(self, key: tuple[str, str]) -> Copy | None:
        """The copy of a (thread, namespace), if there is one."""
        return self._copies.get(key)

    def put(self, key: tuple[str, str], copy: Copy) -> None:
        """Keep ``copy``; one larger than a quarter of the bound is not kept."""
        self._copies.put(key, copy, copy.nbytes())

    def drop_thread(self, thread_id: str) -> None:
        """Forget every namespace of a thread."""
        self._copies.drop_where(lambda key: key[0] == thread_id)


QUIET_S = 0.02
"""A namespace's hot copy is written once this process's puts have paused this long..."""
MAX_DELAY_S = 1.0
"""... or, in a burst of puts that never pauses, this long after it was left."""


@dataclass(frozen=True, slots=True)
class Job:
    """A hot copy to write: the ``seq`` of the row it copies, and ``build()`` making
    ``scripts.WRITE_HEAD``'s KEYS and ARGV (the sealing is left to the writer too)."""

    seq: int
    build: Callable[[], tuple[list[Any], list[Any]]]


class HotWrites:
    """Hot copies written to Redis behind the puts, by a thread of their own.

    A put leaves its namespace's copy here and returns; a copy not yet written is
    replaced by a newer one of its namespace (a higher ``seq``). The thread writes what
    is left once this process's puts pause for ``quiet_s`` (or ``max_delay_s`` after the
    oldest was left, in a burst that never pauses), so a burst of puts writes one copy per
    namespace, its newest, off the puts' path. A copy is read by other processes (this
    one keeps its own, ``CopyCache``), which come after the burst: a copy written later
    than its put, or never (the process died first), costs them a read from PostgreSQL,
    never a wrong one, as a reader trusts a copy only when PostgreSQL names its ``seq``.
    Failures are logged, never raised. :meth:`flush` writes what is left now, once a
    write under way has ended (``AmberSaver.close``, and at exit). A forked child
    starts with nothing to write: its parent writes its own.
    """

    def __init__(
        self, script: Script, quiet_s: float = QUIET_S, max_delay_s: float = MAX_DELAY_S
    ) -> None:
        self.script = script
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self._fresh()
        _LIVE.add(self)

    def _fresh(self) -> None:
        # held while copies taken from _jobs are written; taken before _cond, never after
        self._writing = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._jobs: dict[Any, Job] = {}
        self._first = self._last = 0.0
        self._thread: threading.Thread | None = None

    def later(self, key: Any, job: Job) -> None:
        """Leave ``job`` to be written, replacing an older one of the same ``key`` not yet
        written (a newer one is kept: a reader's rewrite never undoes a put's copy)."""
        now = time.monotonic()
        with self._cond:
            held = self._jobs.get(key)
            if held is not None and held.seq > job.seq:
                return
            if not self._jobs:
                self._first = now
                self._cond.notify()
            self._jobs[key] = job
            self._last = now
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_run, args=(weakref.ref(self),), name="amber-hot-copies", daemon=True
                )
                self._thread.start()

    def flush(self) -> None:
        """Write every copy left, now, in the caller's thread, after any write under way."""
        with self._writing:
            with self._cond:
                jobs, self._jobs = self._jobs, {}
            self._write(jobs)

    def forget(self, thread_id: str) -> None:
        """Drop the copies not yet written of a thread (keyed ``(thread, namespace)``),
        after any write under way."""
        with self._writing, self._cond:
            for key in [k for k in self._jobs if k[0] == thread_id]:
                del self._jobs[key]

    def write(self, keys: list[Any], args: list[Any]) -> None:
        """Write a copy and wait for Redis's reply."""
        try:
            self.script(keys=keys, args=args)
        except (redis.RedisError, OSError) as exc:
            _not_written(keys, exc)

    def _due(self, timeout: float) -> bool:
        """Whether copies are due, once they are (False: none came within ``timeout``)."""
        with self._cond:
            if not self._jobs and not self._cond.wait(timeout):
                return False
            while self._jobs:
                wait = min(self._last + self.quiet_s, self._first + self.max_delay_s)
                wait -= time.monotonic()
                if wait <= 0:
                    return True
                self._cond.wait(wait)
            return False

    def _write(self, jobs: dict[Any, Job]) -> None:
        for job in jobs.values():
            try:
                keys, args = job.build()
            except Exception:
                log.exception("hot copy not built")
                continue
            self.write(keys, args)


_LIVE: weakref.WeakSet[HotWrites] = weakref.WeakSet()
"""Every ``HotWrites`` of this process: flushed at exit, emptied in a forked child."""


def _run(ref: weakref.ref[HotWrites]) -> None:
    """The writer thread: writes copies as they fall due, while their ``HotWrites`` lives
    (it holds only a weak reference, so a saver let go is collected, and its thread ends)."""
    while True:
        hot = ref()
        if hot is None:
            return
        try:
            if hot._due(1.0):
                hot.flush()
        except Exception:  # the thread outlives any one copy: the next ones still go
            log.exception("hot copies not written")
        del hot


def _flush_all() -> None:
    for hot in list(_LIVE):
        hot.flush()


def _forked() -> None:
    for hot in list(_LIVE):
        hot._fresh()


atexit.register(_flush_all)
os.register_at_fork(after_in_child=_forked)


def _not_written(keys: list[Any], why: Exception) -> None:
    log.warning("hot copy %r not written (%s): reads use PostgreSQL", keys[0], why)
