"""``WriteAheadLog``: append entries to segment files, with a chosen fsync policy.

Policies and what a crash can lose:

* ``always`` — ``append`` returns once the entry is written and fsync'd: nothing
  acknowledged is ever lost.
* ``batch`` (default) — group commit: entries are buffered; every
  ``batch_entries`` entries the buffer is written and a background thread
  fsyncs it while appends fill the next batch (an append waits only when the
  batch before the previous one is still not on disk); a batch older than
  ``batch_seconds`` is written and fsync'd by that thread. A process crash
  loses at most the unwritten buffer (< ``batch_entries`` entries); a machine
  crash at most that plus two written batches not yet fsync'd
  (< 3 x ``batch_entries``), or ``batch_seconds`` of entries.
* ``off`` — like ``batch`` but never fsync'd: a process crash loses the unwritten
  buffer, a machine crash whatever the OS had not written yet.

``flush()`` writes and fsyncs the buffer under every policy.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from amber import defaults
from amber.errors import WalError
from amber.wal.closing import Closing
from amber.wal.format import Entry, EntryEncoder
from amber.wal.metrics import NULL_METRICS, Metrics, emit
from amber.wal.segments import (
    TailRepair,
    check_segment,
    fsync_dir,
    fsync_fd,
    iter_segments,
    list_segments,
    lock_directory,
    read_file,
    removable_segments,
    segment_path,
    write_all,
)

logger = logging.getLogger("amber.wal")

FsyncPolicy = Literal["always", "batch", "off"]
FSYNC_POLICIES: tuple[str, ...] = get_args(FsyncPolicy)


class WriteAheadLog(Closing):
    """An append-only, checksummed, segmented log of ``(op, data)`` entries; thread-safe.

    One open log per directory: a second one (in any process) is refused.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        fsync: FsyncPolicy = "batch",
        *,
        batch_entries: int = defaults.WAL_BATCH_ENTRIES,
        batch_seconds: float = defaults.WAL_BATCH_SECONDS,
        segment_entries: int = defaults.WAL_SEGMENT_ENTRIES,
        metrics: Metrics = NULL_METRICS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise WalError(f"unknown fsync policy {fsync!r}; use one of {FSYNC_POLICIES}")
        if batch_entries < 1 or segment_entries < 1 or batch_seconds <= 0:
            raise WalError("batch_entries, segment_entries and batch_seconds must be positive")
        self.directory = Path(directory)
        self.fsync: FsyncPolicy = fsync
        self._always = fsync == "always"
        self._batch_entries = batch_entries
        self._batch_seconds = batch_seconds
        self._segment_entries = segment_entries
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._synced = 0  # bytes of the current segment known to be fsync'd
        self._sync_target = 0  # bytes the flusher is asked to fsync
        self._older_target = 0  # the request before that one
        self._syncing = False  # the flusher is inside fsync (the lock released)
        self._encode = EntryEncoder().encode
        self._buffer: list[bytes] = []
        self._error: WalError | None = None
        self._buffered_since = 0.0
        self._written = 0
        self._broken: WalError | None = None
        self._closed = False
        self.repaired: TailRepair | None = None
        """The torn tail cut when the log was opened, or None if the log was intact."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"cannot create WAL directory: {exc.strerror}"
            raise WalError(msg, directory=str(directory)) from None
        self._lock_fd = lock_directory(self.directory)
        try:
            self._open_last_segment()
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._flusher: threading.Thread | None = None
        if fsync != "always":
            self._flusher = threading.Thread(target=self._flush_loop, name="amber-wal", daemon=True)
            self._flusher.start()

    # -- opening ---------------------------------------------------------------

    def _open_last_segment(self) -> None:
        segments = list_segments(self.directory)
        if not segments:
            self._firsts = [1]
            self._create_segment(1)
            self._last_seq, self._seg_count, self._size = 0, 0, 0
            return
        self._firsts = [first for first, _ in segments]
        first, path = segments[-1]
        data = read_file(path)
        scan = check_segment(path, first, data, last=True, decode=False)  # replay decodes
        if scan.end < len(data):
            self._cut_tail(path, scan.end, len(data))
        self._fd, self._seg_path = self._open_fd(path, os.O_WRONLY | os.O_APPEND), path
        self._last_seq, self._seg_count, self._size = first + scan.count - 1, scan.count, scan.end

    def _cut_tail(self, path: Path, end: int, size: int) -> None:
        reason = "torn or corrupt entry at the end of the last segment"
        self.repaired = TailRepair(str(path), end, size - end, reason)
        logger.warning("WAL %s: cut %d bytes at offset %d (%s)", path, size - end, end, reason)
        fd = self._open_fd(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, end)
            fsync_fd(fd, path)
        except OSError as exc:
            raise WalError(f"cannot cut torn tail: {exc.strerror}", segment=str(path)) from None
        finally:
            os.close(fd)

    def _open_fd(self, path: Path, flags: int) -> int:
        try:
            return os.open(path, flags, 0o644)
        except OSError as exc:
            raise WalError(f"cannot open WAL segment: {exc.strerror}", segment=str(path)) from None

    def _create_segment(self, first_seq: int) -> None:
        path = segment_path(self.directory, first_seq)
        fd = self._open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL)
        self._fd, self._seg_path = fd, path
        fsync_dir(self.directory)

    # -- public API ------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """Sequence of the newest appended entry (0 when the log has none)."""
        return self._last_seq

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    @property
    def first_seq(self) -> int:
        """Sequence of the oldest entry still in the log (older ones were compacted)."""
        return self._firsts[0]

    @property
    def segments(self) -> list[Path]:
        """Segment files, oldest first."""
        return [segment_path(self.directory, first) for first in self._firsts]

    def append(self, op: str, data: Any = None) -> int:
        """Log one entry and return its sequence; durable per the fsync policy."""
        if not isinstance(op, str) or not op:
            raise WalError("operation must be a non-empty string", op=op)
        with self._lock:
            if self._closed or self._broken is not None or self._error is not None:
                self._refuse()
            if self._seg_count >= self._segment_entries:
                self._rotate()
            seq = self._last_seq + 1
            frame = self._encode(seq, self._clock(), op, data)
            if self._always:
                self._write_out([frame], sync=True)
                self._last_seq, self._seg_count = seq, self._seg_count + 1
                return seq
            if not self._buffer:
                self._buffered_since = time.monotonic()
            self._buffer.append(frame)
            self._last_seq, self._seg_count = seq, self._seg_count + 1
            if len(self._buffer) >= self._batch_entries:
                try:
                    self._hand_off()  # may wait, letting other threads append
                except WalError:
                    if self._buffer and self._buffer[-1] is frame:  # never written: not logged
                        self._buffer.pop()
                        self._last_seq, self._seg_count = seq - 1, self._seg_count - 1
                    raise
            return seq

    def flush(self) -> None:
        """Write and fsync every buffered entry, whatever the policy."""
        with self._lock:
            self._check_usable()
            self._drain(sync=True)

    def entries_after(self, seq: int) -> Iterator[Entry]:
        """Yield every entry with a sequence above ``seq``, in order, checking checksums.

        ``WalCorruption`` (naming segment and offset) if a segment is damaged;
        ``WalError`` if entries after ``seq`` were already compacted away.
        """
        with self._lock:
            if not self._closed:
                self._check_usable()
                self._drain(sync=False)
            firsts, size, last = list(self._firsts), self._size, self._last_seq
        if seq >= last:
            return iter(())
        if seq + 1 < firsts[0]:
            raise WalError(
                f"entries after {seq} are no longer in the log; it starts at {firsts[0]}",
                directory=str(self.directory),
            )
        start = max(i for i, first in enumerate(firsts) if first <= seq + 1)
        chosen = [(f, segment_path(self.directory, f)) for f in firsts[start:]]
        return iter_segments(chosen, seq, size)

    def advance_to(self, seq: int) -> None:
        """Make the next append get a sequence above ``seq``, in a new segment.

        For a checkpoint that covers entries this log no longer has (its tail
        was cut, or its directory lost): new entries must not reuse their numbers.
        """
        with self._lock:
            self._check_usable()
            if seq <= self._last_seq:
                return
            self._drain(sync=True)
            self._wait_idle()
            self._check_usable()
            self._start_segment(seq + 1)
            self._last_seq = seq

    def drop_through(self, seq: int) -> list[Path]:
        """Delete whole segments whose entries are all <= ``seq``; return their paths."""
        with self._lock:
            removed = []
            for first in removable_segments(self._firsts, seq):
                path = segment_path(self.directory, first)
                path.unlink(missing_ok=True)
                removed.append(path)
                self._firsts.remove(first)
            if removed:
                fsync_dir(self.directory)
            return removed

    def close(self) -> None:
        """Flush (fsync unless the policy is ``off``) and close; later appends raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            self._wait_idle()
            try:
                if self._broken is None:
                    self._drain(sync=self.fsync != "off")
            finally:
                self._cond.notify_all()  # wake appends waiting for an fsync
                os.close(self._fd)
                os.close(self._lock_fd)
        if self._flusher is not None:
            self._flusher.join()

    # -- internals (called with the lock held) ---------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise WalError("the write-ahead log is closed", directory=str(self.directory))
        if self._broken is not None:
            raise WalError(
                f"the write-ahead log stopped after an earlier failure: {self._broken.message}",
                directory=str(self.directory),
            )

    def _refuse(self) -> None:
        self._check_usable()
        if self._error is not None:
            error, self._error = self._error, None
            raise error  # the failed batch is back in the buffer; the next write retries it

    def _drain(self, *, sync: bool) -> None:
        self._error = None  # a failed batch is retried right here
        batch, self._buffer = self._buffer, []
        try:
            self._write_out(batch, sync=sync)
        except WalError:
            self._buffer = batch + self._buffer
            raise

    def _hand_off(self) -> None:
        """Write a full buffer and ask the flusher to fsync it (``off``: write only).

        The fsync of one batch overlaps the filling of the next; an append waits
        only if the batch before the previous one is still not on disk.
        """
        self._drain(sync=False)
        if self.fsync != "batch":
            return
        while self._synced < self._older_target and self._broken is None and not self._closed:
            self._cond.wait()
        if self._broken is not None:
            self._check_usable()
        if self._closed:
            return  # close() wrote and fsync'd everything
        self._older_target, self._sync_target = self._sync_target, self._size
        self._cond.notify_all()

    def _wait_idle(self) -> None:
        while self._syncing:
            self._cond.wait()

    def _write_out(self, frames: list[bytes], *, sync: bool) -> None:
        """Write frames at the end of the segment (undone on failure), then maybe fsync."""
        if frames:
            data = b"".join(frames)
            try:
                write_all(self._fd, data, self._seg_path)
            except WalError:
                try:
                    os.ftruncate(self._fd, self._size)
                except OSError as exc:
                    self._broken = WalError(f"cannot undo a partial write: {exc.strerror}")
                raise
            self._size += len(data)
            self._written += len(frames)
            fields = {"entry_count": self._written, "batch_size": len(frames)}
            emit(self._metrics, "wal.appended", fields)
        if sync and self._synced < self._size:
            try:
                fsync_fd(self._fd, self._seg_path)
            except WalError as exc:
                self._broken = exc  # after a failed fsync the page cache cannot be trusted
                raise
            self._synced = self._size

    def _rotate(self) -> None:
        self._wait_idle()  # may let other threads in: check again after it
        self._check_usable()
        if self._seg_count < self._segment_entries:
            return
        self._drain(sync=self.fsync != "off")
        self._start_segment(self._last_seq + 1)

    def _start_segment(self, first_seq: int) -> None:
        old_fd = self._fd
        self._create_segment(first_seq)
        os.close(old_fd)
        self._firsts.append(first_seq)
        self._seg_count, self._size = 0, 0
        self._synced = self._sync_target = self._older_target = 0

    def _flush_loop(self) -> None:
        """Background: fsync what appends asked for; write a batch older than batch_seconds."""
        try:
            self._flush_forever()
        except BaseException as exc:  # never leave appends waiting for a dead thread
            with self._cond:
                self._broken = WalError(f"the WAL background thread failed: {exc!r}")
                self._cond.notify_all()
            raise

    def _flush_forever(self) -> None:
        sync = self.fsync == "batch"
        with self._cond:
            while not self._closed:
                aged = self._buffer and self._broken is None and self._error is None
                aged = aged and time.monotonic() - self._buffered_since >= self._batch_seconds
                if aged:
                    try:
                        self._drain(sync=False)
                    except WalError as exc:
                        logger.error("WAL background write failed: %s", exc)
                        self._error = exc
                    if sync:
                        self._sync_target = max(self._sync_target, self._size)
                if sync and self._sync_target > self._synced and self._broken is None:
                    self._fsync_unlocked(self._sync_target)
                else:
                    self._cond.wait(self._batch_seconds / 4)

    def _fsync_unlocked(self, target: int) -> None:
        """fsync the current segment with the lock released, then record ``target`` as synced."""
        fd, path = self._fd, self._seg_path
        self._syncing = True
        self._cond.release()
        try:
            fsync_fd(fd, path)
            error = None
        except WalError as exc:
            error = exc
        finally:
            self._cond.acquire()
            self._syncing = False
        if error is None:
            self._synced = max(self._synced, target)
        else:
            self._broken = error
        self._cond.notify_all()
