"""``StateStore``: an agent's in-process state, made durable by checkpoints plus the WAL.

``log(op, data)`` appends to the WAL first, then applies. Checkpoints are taken
on demand, on ``close()``, every ``checkpoint_interval`` seconds and every
``checkpoint_entries`` entries (both checked on ``log``). ``recover()`` loads the
newest checkpoint that verifies, falls back to older ones if it does not, and
replays the log after the chosen one. Retention keeps the log after the oldest
checkpoint kept (see ``amber.wal.retention``).
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amber import defaults
from amber.errors import WalCorruption, WalError
from amber.wal.closing import Closing
from amber.wal.files import (
    Written,
    check_level,
    list_checkpoints,
    list_temp_files,
    read_checkpoint,
)
from amber.wal.files import write_checkpoint as write_file
from amber.wal.log import FsyncPolicy, WriteAheadLog
from amber.wal.metrics import NULL_METRICS, Metrics, emit
from amber.wal.operations import Handler, Operations, initial_state
from amber.wal.retention import checkpoint_dir, checkpoint_seq, expire_checkpoints, wal_dir
from amber.wal.segments import TailRepair

logger = logging.getLogger("amber.wal")

Apply = Callable[[Any, str, Any], Any]
"""``apply(state, op, data) -> new state``."""


@dataclass(frozen=True)
class Recovery:
    """What ``recover()`` did: which checkpoint, how many entries replayed, what it skipped."""

    checkpoint: Path | None
    checkpoint_seq: int
    entries_replayed: int
    seconds: float
    corrupt_checkpoints: list[Path] = field(default_factory=list)
    tail_repair: TailRepair | None = None
    state_lost: bool = False


class StateStore(Closing):
    """Durable agent state: WAL-first updates, periodic checkpoints, crash recovery."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        apply: Apply | None = None,
        initial: Any = None,
        *,
        fsync: FsyncPolicy = "batch",
        compression_level: int = defaults.CHECKPOINT_ZSTD_LEVEL,
        checkpoint_interval: float = defaults.CHECKPOINT_INTERVAL,
        checkpoint_entries: int = defaults.CHECKPOINT_ENTRIES,
        retention: float = defaults.CHECKPOINT_RETENTION,
        keep_checkpoints: int = defaults.CHECKPOINT_KEEP,
        batch_entries: int = defaults.WAL_BATCH_ENTRIES,
        batch_seconds: float = defaults.WAL_BATCH_SECONDS,
        segment_entries: int = defaults.WAL_SEGMENT_ENTRIES,
        metrics: Metrics = NULL_METRICS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if keep_checkpoints < 1 or checkpoint_entries < 1 or checkpoint_interval <= 0:
            raise WalError(
                "keep_checkpoints, checkpoint_entries and checkpoint_interval must be > 0"
            )
        check_level(compression_level)
        self.directory = Path(directory)
        self._apply: Apply = apply if apply is not None else Operations()
        self._initial = initial_state() if initial is None else initial
        self._level = compression_level
        self._interval = checkpoint_interval
        self._every = checkpoint_entries
        self._retention = retention
        self._keep = keep_checkpoints
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.RLock()
        self._closed = False
        self._ckpts = checkpoint_dir(self.directory)
        try:
            self._ckpts.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WalError(f"cannot create {self._ckpts}: {exc.strerror}") from None
        for tmp in list_temp_files(self._ckpts):
            tmp.unlink(missing_ok=True)  # a checkpoint write that a crash interrupted
        self._wal = WriteAheadLog(
            wal_dir(self.directory),
            fsync,
            batch_entries=batch_entries,
            batch_seconds=batch_seconds,
            segment_entries=segment_entries,
            metrics=metrics,
            clock=clock,
        )
        self._state: Any = None
        self._ckpt_seq = 0
        self._ckpt_time = clock()
        try:
            self.last_recovery: Recovery = self.recover()
            """What the recovery at open (or the latest ``recover()``) did."""
        except BaseException:
            self._wal.close()
            raise

    @property
    def state(self) -> Any:
        """The current state (checkpoint plus every entry logged after it)."""
        return self._state

    @property
    def wal(self) -> WriteAheadLog:
        """The store's write-ahead log."""
        return self._wal

    def register(self, op: str, handler: Handler) -> None:
        """Add an operation ``handler(state, data) -> new state`` (default ``apply`` only)."""
        if not isinstance(self._apply, Operations):
            raise WalError("register() needs the built-in apply; handle ops in your apply")
        self._apply.register(op, handler)

    def log(self, op: str, data: Any = None) -> int:
        """Append ``(op, data)`` to the WAL, then apply it; return its sequence."""
        with self._lock:
            self._check_open()
            if isinstance(self._apply, Operations):
                self._apply.check(op, data)
            seq = self._wal.append(op, data)
            self._state = self._apply_one(self._state, seq, op, data)
            due = self._clock() - self._ckpt_time >= self._interval
            if due or seq - self._ckpt_seq >= self._every:
                self.checkpoint()
            return seq

    def checkpoint(self) -> Written:
        """Write a checkpoint of the current state now, then apply retention."""
        with self._lock:
            self._check_open()
            return self._checkpoint()

    def recover(self) -> Recovery:
        """Rebuild the state from the newest valid checkpoint and the log after it."""
        with self._lock:
            started = time.perf_counter()
            state, seq, used, corrupt = self._load_newest_checkpoint()
            lost = False
            if used is None and corrupt and self._wal.first_seq > 1:
                logger.critical(
                    "all %d checkpoints in %s failed their checksums and the log before %d is "
                    "gone: starting from the initial state",
                    len(corrupt),
                    self._ckpts,
                    self._wal.first_seq,
                )
                seq, lost = self._wal.last_seq, True
            elif used is None and corrupt:
                logger.critical(
                    "all %d checkpoints in %s failed their checksums: rebuilding from the log",
                    len(corrupt),
                    self._ckpts,
                )
            if seq > self._wal.last_seq:
                logger.error(
                    "checkpoint covers up to %d but the log ends at %d: continuing after %d",
                    seq,
                    self._wal.last_seq,
                    seq,
                )
                self._wal.advance_to(seq)
            replayed = 0
            for entry in self._wal.entries_after(seq):
                state = self._apply_one(state, entry.seq, entry.op, entry.data)
                replayed += 1
            self._state, self._ckpt_seq, self._ckpt_time = state, seq, self._clock()
            if lost:
                self._checkpoint()
            seconds = time.perf_counter() - started
            emit(
                self._metrics,
                "recovery.completed",
                {
                    "duration_ms": seconds * 1000,
                    "wal_entries_replayed": replayed,
                    "checkpoint_seq": seq,
                    "fallbacks": len(corrupt),
                },
            )
            return Recovery(used, seq, replayed, seconds, corrupt, self._wal.repaired, lost)

    def close(self) -> None:
        """Checkpoint if anything was logged since the last one (and the log is open); close."""
        with self._lock:
            if self._closed:
                return
            try:
                if not self._wal.closed and self._wal.last_seq > self._ckpt_seq:
                    self._checkpoint()
            finally:
                self._closed = True
                self._wal.close()

    # -- internals ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise WalError("the state store is closed", directory=str(self.directory))

    def _apply_one(self, state: Any, seq: int, op: str, data: Any) -> Any:
        try:
            return self._apply(state, op, data)
        except WalError:
            raise
        except Exception as exc:
            raise WalError(f"applying {op!r} failed: {exc!r}", seq=seq, op=op) from exc

    def _load_newest_checkpoint(self) -> tuple[Any, int, Path | None, list[Path]]:
        corrupt: list[Path] = []
        for path in reversed(list_checkpoints(self._ckpts)):
            try:
                header, state = read_checkpoint(path)
            except WalCorruption as exc:
                logger.error("%s; falling back to the previous checkpoint", exc)
                corrupt.append(path)
                continue
            return state, header.wal_seq, path, corrupt
        return copy.deepcopy(self._initial), 0, None, corrupt

    def _checkpoint(self) -> Written:
        self._wal.flush()
        seq = self._wal.last_seq
        written = write_file(
            self._ckpts, self._state, wal_seq=seq, level=self._level, clock=self._clock
        )
        header = written.header
        emit(
            self._metrics,
            "checkpoint.created",
            {
                "duration_ms": written.seconds * 1000,
                "size_bytes": header.compressed_size,
                "uncompressed_bytes": header.uncompressed_size,
                "compression_ratio": header.uncompressed_size / max(header.compressed_size, 1),
                "wal_seq": seq,
            },
        )
        self._ckpt_seq, self._ckpt_time = seq, self._clock()
        expire_checkpoints(
            self._ckpts, now=self._clock(), retention=self._retention, keep=self._keep
        )
        kept = list_checkpoints(self._ckpts)
        if kept:
            self._wal.drop_through(checkpoint_seq(kept[0]))
        return written
