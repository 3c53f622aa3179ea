"""WAL segment files on disk: naming, listing, reading, checking, and durable file helpers."""

from __future__ import annotations

import errno
import fcntl
import itertools
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from amber import observe
from amber.errors import WalCorruption, WalError
from amber.wal.format import Entry, Scan, decode_frame, scan_frames, valid_frame_after

logger = logging.getLogger("amber.wal")

SEGMENT_SUFFIX = ".wal"


def segment_path(directory: Path, first_seq: int) -> Path:
    """Path of the segment whose first entry has ``first_seq`` (the name sorts by sequence)."""
    return directory / f"{first_seq:020d}{SEGMENT_SUFFIX}"


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """Segments in ``directory`` as (first sequence, path), oldest first."""
    found = []
    for path in directory.glob(f"*{SEGMENT_SUFFIX}"):
        stem = path.name[: -len(SEGMENT_SUFFIX)]
        if stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def removable_segments(firsts: list[int], through_seq: int) -> list[int]:
    """First sequences of segments holding only entries <= ``through_seq``; never the last."""
    return [first for first, nxt in itertools.pairwise(firsts) if nxt - 1 <= through_seq]


LOCK_NAME = "LOCK"


def lock_directory(directory: Path) -> int:
    """Take the directory's writer lock (released when the fd closes or the process dies)."""
    path = directory / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WalError(f"cannot open lock file: {exc.strerror}", file=str(path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise WalError(
            "another WriteAheadLog has this directory open", directory=str(directory)
        ) from None
    return fd


def write_all(fd: int, data: bytes | memoryview, what: Path) -> None:
    """Write every byte or raise ``WalError`` naming the file (ENOSPC, EIO, ...)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError as exc:
            raise WalError(
                f"write failed: {exc.strerror}", file=str(what), errno=exc.errno
            ) from None
        view = view[written:]


def fsync_fd(fd: int, what: Path) -> None:
    """fsync or raise ``WalError`` naming the file."""
    t0 = time.perf_counter()
    try:
        os.fsync(fd)
    except OSError as exc:
        raise WalError(f"fsync failed: {exc.strerror}", file=str(what), errno=exc.errno) from None
    observe.emit(observe.WAL_FSYNC, time.perf_counter() - t0)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a create, rename or unlink in it is durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fsync_fd(fd, directory)
    finally:
        os.close(fd)


def read_file(path: Path, limit: int | None = None) -> bytes:
    """Read a whole file (or its first ``limit`` bytes), as ``WalError`` on failure."""
    try:
        with path.open("rb") as fh:
            return fh.read() if limit is None else fh.read(limit)
    except OSError as exc:
        code = exc.errno or errno.EIO
        raise WalError(f"cannot read: {exc.strerror}", file=str(path), errno=code) from None


@dataclass(frozen=True, slots=True)
class TailRepair:
    """A torn or corrupt tail cut from the last segment when the log was opened."""

    segment: str
    offset: int
    bytes_cut: int
    reason: str


def check_segment(
    path: Path, first_seq: int, data: bytes, *, last: bool, decode: bool = True
) -> Scan:
    """Scan a segment; return what is intact (``Scan.end`` is where the intact part ends).

    Damage followed by intact entries, or any damage in a segment that is not
    the last, is ``WalCorruption`` with file and offset. Damage at the end of the
    last segment (nothing intact after it) is a torn tail: the caller cuts it.
    """
    scan = scan_frames(data, first_seq, decode=decode)
    if scan.problem is None:
        return scan
    next_seq = first_seq + scan.count
    intact_here = decode_frame(memoryview(data), scan.end) is not None
    if not last or intact_here or valid_frame_after(data, scan.end, next_seq) is not None:
        raise WalCorruption(
            f"WAL segment is corrupt: {scan.problem}", segment=str(path), offset=scan.end
        )
    return scan


def iter_segments(
    segments: list[tuple[int, Path]], after: int, active_size: int | None = None
) -> Iterator[Entry]:
    """Yield entries with seq > ``after`` from consecutive segments, checking every checksum.

    ``active_size`` bounds how much of the last segment is read (a writer may be
    appending to it). A gap in sequences is ``WalCorruption``.
    """
    expected: int | None = None
    for index, (first, path) in enumerate(segments):
        if expected is not None and first != expected:
            raise WalCorruption(
                f"WAL segment starts at {first}, expected {expected}", segment=str(path), offset=0
            )
        last = index == len(segments) - 1
        data = read_file(path, active_size if last else None)
        scan = check_segment(path, first, data, last=False)
        expected = first + scan.count
        if expected - 1 <= after:
            continue
        for entry in scan.entries:
            if entry.seq > after:
                yield entry
