"""A store directory's layout, and the retention rule that compaction applies.

Rule: a checkpoint is deleted once older than the retention period, but the
newest ``keep`` checkpoints are always kept; a WAL segment is deleted only when
every entry in it is at or before the WAL sequence of the *oldest* checkpoint
still kept, so recovery can fall back to any kept checkpoint and replay the log
after it. Temp files of checkpoint writes that never finished are deleted too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from amber import defaults
from amber.wal.files import (
    checkpoint_time,
    expired_checkpoints,
    list_checkpoints,
    list_temp_files,
)
from amber.wal.segments import fsync_dir, list_segments, removable_segments, segment_path

logger = logging.getLogger("amber.wal")

STALE_TEMP_SECONDS = 3600.0
"""A checkpoint temp file this old belongs to no running write and may be deleted."""


def wal_dir(directory: Path) -> Path:
    """Where a store keeps its WAL segments."""
    return directory / "wal"


def checkpoint_dir(directory: Path) -> Path:
    """Where a store keeps its checkpoint files."""
    return directory / "checkpoints"


def checkpoint_seq(path: Path) -> int:
    """The WAL sequence a checkpoint file covers, from its name."""
    return int(path.name.split("-", 1)[0])


@dataclass
class Compaction:
    """Files a compaction removed."""

    checkpoints: list[Path] = field(default_factory=list)
    segments: list[Path] = field(default_factory=list)
    temp_files: list[Path] = field(default_factory=list)

    @property
    def removed(self) -> list[Path]:
        """Every removed file."""
        return self.checkpoints + self.segments + self.temp_files


def compact(
    directory: Path,
    *,
    now: float | None = None,
    retention: float = defaults.CHECKPOINT_RETENTION,
    keep: int = defaults.CHECKPOINT_KEEP,
    temp_age: float = STALE_TEMP_SECONDS,
    removed: Callable[[Path], None] | None = None,
) -> Compaction:
    """Apply the retention rule to a store directory; return what was removed
    (``removed(path)`` is called after each file it deletes).

    Segments are planned from the files on disk; a live ``WriteAheadLog`` does
    the same through ``drop_through`` (``StateStore`` uses that).
    """
    now = time.time() if now is None else now
    done = Compaction()
    ckpts = checkpoint_dir(directory)
    if ckpts.is_dir():
        done.checkpoints = expire_checkpoints(
            ckpts, now=now, retention=retention, keep=keep, removed=removed
        )
        for tmp in list_temp_files(ckpts):
            if now - tmp.stat().st_mtime > temp_age:
                tmp.unlink(missing_ok=True)
                done.temp_files.append(tmp)
                if removed:
                    removed(tmp)
        kept = list_checkpoints(ckpts)
        wals = wal_dir(directory)
        if kept and wals.is_dir():
            firsts = [first for first, _ in list_segments(wals)]
            for first in removable_segments(firsts, checkpoint_seq(kept[0])):
                path = segment_path(wals, first)
                path.unlink(missing_ok=True)
                done.segments.append(path)
                if removed:
                    removed(path)
            if done.segments:
                fsync_dir(wals)
    return done


def expire_checkpoints(
    ckpts: Path,
    *,
    now: float,
    retention: float,
    keep: int,
    removed: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Delete checkpoints past retention (keeping the newest ``keep``); return them."""
    paths = list_checkpoints(ckpts)
    times = [checkpoint_time(p) for p in paths]
    expired = expired_checkpoints(paths, times, now=now, retention=retention, keep=keep)
    for path in expired:
        path.unlink(missing_ok=True)
        logger.info("deleted expired checkpoint %s", path)
        if removed:
            removed(path)
    if expired:
        fsync_dir(ckpts)
    return expired
