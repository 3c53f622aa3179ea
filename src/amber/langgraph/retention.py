"""Deleting, pruning, copying and expiring LangGraph threads.

Every operation here holds the threads' advisory locks exclusive for its transaction
(sorted, so two never deadlock), while a put holds its thread's lock shared: nothing
is deleted between a put's check that the values it names exist and its commit.
What a namespace's newest checkpoint needs (its row, the blobs it names, its pending
writes, and writes of a newer checkpoint still being saved) is never deleted by
``prune`` or ``gc``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import redis
from psycopg_pool import ConnectionPool

from amber.errors import InvalidValue, NotSupported
from amber.keys import Keys
from amber.langgraph import sql as lsql
from amber.langgraph.copies import CopyCache, HotWrites
from amber.langgraph.targets import text_id

log = logging.getLogger("amber.langgraph")

STRATEGIES = ("keep_latest", "delete")


@dataclass(frozen=True)
class GcReport:
    """What one ``gc`` removed (counts of rows), and the threads it left alone."""

    expired_threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    skipped: tuple[str, ...] = ()
    """Threads not pruned because their graph uses a ``DeltaChannel``."""


class Retention:
    """Thread deletion, ``prune``, ``copy_thread``, TTLs and ``gc`` for the saver."""

    def __init__(
        self,
        client: redis.Redis,
        pool: ConnectionPool,
        keys: Keys,
        cache: CopyCache,
        hot: HotWrites,
        default_ttl_s: float | None,
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.cache = cache
        self.hot = hot
        self.default_ttl_s = default_ttl_s

    @contextlib.contextmanager
    def _locked(self, thread_ids: Iterable[str]) -> Iterator[psycopg.Connection[Any]]:
        with self.pg.connection() as conn, conn.transaction():
            for tid in sorted(set(thread_ids)):
                conn.execute(lsql.LOCK_THREAD, (lsql.THREAD_LOCK_SPACE, tid))
            yield conn

    def _forget(self, thread_ids: Iterable[str]) -> None:
        """Drop the hot copies and cached blobs of threads whose newest checkpoint may be gone."""
        ids = list(thread_ids)
        for tid in ids:
            self.cache.drop_thread(tid)
            self.hot.forget(tid)  # a copy written after the delete would only linger
        if not ids:
            return
        try:
            self.redis.delete(*(self.keys.lg_heads(tid) for tid in ids))
        except (redis.RedisError, OSError) as exc:  # a stale copy is never used: PG decides
            log.warning("hot copies of %d thread(s) not deleted: %s", len(ids), exc)

    def delete_threads(self, thread_ids: Sequence[str]) -> tuple[int, int, int]:
        """Delete every checkpoint, write, blob and TTL of the threads; returns the counts."""
        ids = [text_id(t, "thread_id") for t in thread_ids]
        if not ids:
            return 0, 0, 0
        with self._locked(ids) as conn:
            row = conn.execute(lsql.DELETE_THREADS, {"threads": ids}).fetchone()
        self._forget(ids)
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    def prune(self, thread_ids: Sequence[str], strategy: str, keep: int = 1) -> GcReport:
        """``keep_latest``: keep each namespace's newest ``keep`` checkpoints (and what they
        need); ``delete``: delete the threads."""
        if strategy not in STRATEGIES:
            raise InvalidValue(
                f"prune strategy {strategy!r} is not one of {STRATEGIES}", field="strategy"
            )
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise InvalidValue("keep must be an integer of at least 1", field="keep")
        ids = [text_id(t, "thread_id") for t in thread_ids]
        if strategy == "delete":
            c, w, b = self.delete_threads(ids)
            return GcReport(checkpoints=c, writes=w, blobs=b)
        with self.pg.connection() as conn:
            delta = sorted(r[0] for r in conn.execute(lsql.DELTA_THREADS, (ids,)).fetchall())
        if delta:
            raise NotSupported(
                "keep_latest refuses threads whose graph uses a DeltaChannel: their values"
                " are rebuilt from older checkpoints' writes. Delete them instead.",
                thread_ids=delta,
            )
        totals = [0, 0, 0]
        for tid in dict.fromkeys(ids):
            for i, n in enumerate(self._tidy(tid, keep)):
                totals[i] += n
        return GcReport(checkpoints=totals[0], writes=totals[1], blobs=totals[2])

    def _tidy(self, thread_id: str, keep: int | None) -> tuple[int, int, int]:
        """Prune one thread to ``keep`` per namespace (None: no pruning) and drop what no
        checkpoint of it needs any more. Returns (checkpoints, writes, blobs) deleted."""
        checkpoints = writes = 0
        with self._locked([thread_id]) as conn:
            if keep is not None:
                row = conn.execute(
                    lsql.PRUNE_THREAD, {"thread_id": thread_id, "keep": keep}
                ).fetchone()
                assert row is not None
                checkpoints, writes = int(row[0]), int(row[1])
            writes += conn.execute(lsql.ORPHAN_WRITES, {"thread_id": thread_id}).rowcount
            blobs = conn.execute(lsql.UNUSED_BLOBS, {"thread_id": thread_id}).rowcount
        return checkpoints, writes, blobs

    def delete_for_runs(self, run_ids: Sequence[str]) -> tuple[int, int, int]:
        """Delete the checkpoints of these runs (and their writes, and blobs left unused)."""
        runs = [text_id(r, "run_id") for r in run_ids]
        if not runs:
            return 0, 0, 0
        with self.pg.connection() as conn:
            threads = [r[0] for r in conn.execute(lsql.RUN_THREADS, (runs,)).fetchall()]
        if not threads:
            return 0, 0, 0
        blobs = 0
        with self._locked(threads) as conn:
            row = conn.execute(lsql.DELETE_RUNS, {"runs": runs, "threads": threads}).fetchone()
            for tid in threads:
                blobs += conn.execute(lsql.UNUSED_BLOBS, {"thread_id": tid}).rowcount
        self._forget(threads)
        assert row is not None
        return int(row[0]), int(row[1]), blobs

    def copy_thread(self, source: str, target: str) -> tuple[int, int, int]:
        """Copy every checkpoint, write and blob of ``source`` to ``target``."""
        src, dst = text_id(source, "source_thread_id"), text_id(target, "target_thread_id")
        if src == dst:
            return 0, 0, 0
        with self._locked([src, dst]) as conn:
            row = conn.execute(lsql.COPY_THREAD, {"source": src, "target": dst}).fetchone()
        self._forget([dst])
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    def set_ttl(self, thread_id: str, seconds: float | None) -> None:
        """Give a thread its own TTL (from now, and again at each put); None: the default."""
        tid = text_id(thread_id, "thread_id")
        with self.pg.connection() as conn:
            if seconds is None:
                conn.execute(lsql.CLEAR_TTL, {"thread_id": tid, "default": self.default_ttl_s})
                return
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
                raise InvalidValue("ttl must be a positive number of seconds", field="ttl")
            conn.execute(lsql.SET_TTL, {"thread_id": tid, "ttl": float(seconds)})

    def gc(
        self,
        keep_latest: int | None = None,
        thread_ids: Sequence[str] | None = None,
        batch: int = 100,
    ) -> GcReport:
        """Delete expired threads; prune every thread to its newest ``keep_latest`` checkpoints
        per namespace (threads using a ``DeltaChannel`` are skipped and named); drop writes
        and blobs no checkpoint needs. ``thread_ids``: only these threads, not every one."""
        if keep_latest is not None and (not isinstance(keep_latest, int) or keep_latest < 1):
            raise InvalidValue("keep_latest must be an integer of at least 1", field="keep_latest")
        only = None if thread_ids is None else [text_id(t, "thread_id") for t in thread_ids]
        expired = checkpoints = writes = blobs = 0
        while True:
            with self.pg.connection() as conn:
                if only is None:
                    rows = conn.execute(lsql.EXPIRED_THREADS, (batch,)).fetchall()
                else:
                    rows = conn.execute(lsql.STILL_EXPIRED, (only,)).fetchall()
            due = [r[0] for r in rows]
            if not due:
                break
            with self._locked(due) as conn:  # a put may have renewed one meanwhile
                still = [r[0] for r in conn.execute(lsql.STILL_EXPIRED, (due,)).fetchall()]
                row = conn.execute(lsql.DELETE_THREADS, {"threads": still}).fetchone()
            assert row is not None
            self._forget(still)
            expired += len(still)
            checkpoints, writes, blobs = (
                checkpoints + int(row[0]),
                writes + int(row[1]),
                blobs + int(row[2]),
            )
            if only is not None:
                break
        skipped: list[str] = []
        for page in self._thread_pages(only, batch):
            with self.pg.connection() as conn:
                delta = (
                    {r[0] for r in conn.execute(lsql.DELTA_THREADS, (page,)).fetchall()}
                    if keep_latest is not None and page
                    else set()
                )
            for tid in page:
                keep = None if tid in delta else keep_latest
                c, w, b = self._tidy(tid, keep)
                checkpoints, writes, blobs = checkpoints + c, writes + w, blobs + b
            skipped += sorted(delta)
        return GcReport(expired, checkpoints, writes, blobs, tuple(skipped))

    def _thread_pages(self, only: list[str] | None, batch: int) -> Iterator[list[str]]:
        if only is not None:
            yield list(dict.fromkeys(only))
            return
        after = ""
        while True:
            with self.pg.connection() as conn:
                page = [r[0] for r in conn.execute(lsql.THREADS_PAGE, (after, batch)).fetchall()]
            yield page
            if len(page) < batch:
                return
            after = page[-1]
