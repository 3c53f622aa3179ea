"""Checkpoint files: a 256-byte header (see ``amber.wal.format``) and a zstd msgpack body.

Written atomically: a temp file in the same directory, written and fsync'd, then
renamed over its final name, then the directory fsync'd. A reader therefore sees
a complete file or none; a damaged one fails its header CRC or body SHA-256.

The default zstd level is 3, by bench/bench_wal.py on a 50 MB state: level 9
(ADR-003's) compressed 1.1% smaller in five times the time (2.07 s against
401 ms), level 1 was 190 ms faster but 12.6% larger; level 3 keeps nearly all
of level 9's saving at a fifth of its cost (docs/wal.md has the table).
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from amber import defaults
from amber.errors import WalCorruption, WalError
from amber.wal.format import HEADER_SIZE, Header, decode_header, encode_header, pack, unpack
from amber.wal.segments import fsync_dir, fsync_fd, read_file, write_all

CKPT_SUFFIX = ".ckpt"
TMP_SUFFIX = ".tmp"


def checkpoint_name(header: Header) -> str:
    """File name of a checkpoint: sorts by WAL sequence, then time."""
    return (
        f"{header.wal_seq:020d}-{header.timestamp_ns:020d}-{header.checkpoint_id.hex}{CKPT_SUFFIX}"
    )


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in ``directory``, oldest first (by name: WAL sequence, then time)."""
    return sorted(p for p in directory.glob(f"*{CKPT_SUFFIX}") if not p.name.startswith("."))


def list_temp_files(directory: Path) -> list[Path]:
    """Leftover temp files of checkpoint writes that never finished."""
    return sorted(directory.glob(f".*{CKPT_SUFFIX}{TMP_SUFFIX}"))


def check_level(level: int) -> None:
    """Refuse a zstd level outside 1..22 with a ``WalError``."""
    if not isinstance(level, int) or not 1 <= level <= 22:
        raise WalError(f"zstd compression level must be 1..22, got {level!r}")


@dataclass(frozen=True, slots=True)
class Written:
    """A checkpoint file just written: where, its header, and what writing it cost."""

    path: Path
    header: Header
    seconds: float


def write_checkpoint(
    directory: Path,
    state: Any,
    *,
    wal_seq: int,
    level: int = defaults.CHECKPOINT_ZSTD_LEVEL,
    clock: Callable[[], float] = time.time,
) -> Written:
    """Serialize, compress and durably write ``state`` as a checkpoint at ``wal_seq``."""
    check_level(level)
    started = time.perf_counter()
    body = pack(state)
    compressed = zstandard.ZstdCompressor(level=level, threads=-1).compress(body)  # all cores
    header = Header(
        checkpoint_id=uuid.uuid4(),
        timestamp_ns=int(clock() * 1e9),
        wal_seq=wal_seq,
        compressed_size=len(compressed),
        uncompressed_size=len(body),
        sha256=hashlib.sha256(compressed).digest(),
        level=level,
    )
    final = directory / checkpoint_name(header)
    tmp = directory / f".{final.name}{TMP_SUFFIX}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise WalError(f"cannot create checkpoint file: {exc.strerror}", file=str(tmp)) from None
    try:
        try:
            write_all(fd, encode_header(header), tmp)
            write_all(fd, compressed, tmp)
            fsync_fd(fd, tmp)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        fsync_dir(directory)
    except (OSError, WalError) as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, WalError):
            raise
        raise WalError(f"cannot write checkpoint: {exc.strerror}", file=str(final)) from None
    return Written(final, header, time.perf_counter() - started)


def read_header(path: Path) -> Header:
    """Read and check a checkpoint's header (``WalCorruption`` if damaged)."""
    return _header(path, read_file(path, HEADER_SIZE))


def _header(path: Path, raw: bytes) -> Header:
    try:
        return decode_header(raw[:HEADER_SIZE])
    except ValueError as exc:
        raise WalCorruption(f"bad checkpoint header: {exc}", file=str(path), offset=0) from None


def read_checkpoint(path: Path) -> tuple[Header, Any]:
    """Read, verify (header CRC, size, SHA-256) and decode a checkpoint file."""
    raw = read_file(path)
    header = _header(path, raw)
    body = memoryview(raw)[HEADER_SIZE:]
    if len(body) != header.compressed_size:
        raise WalCorruption(
            f"checkpoint body is {len(body)} bytes, header says {header.compressed_size}",
            file=str(path),
            offset=HEADER_SIZE + min(len(body), header.compressed_size),
        )
    if hashlib.sha256(body).digest() != header.sha256:
        raise WalCorruption("checkpoint body fails its SHA-256", file=str(path), offset=HEADER_SIZE)
    try:
        plain = zstandard.ZstdDecompressor().decompress(
            body, max_output_size=header.uncompressed_size
        )
        if len(plain) != header.uncompressed_size:
            raise ValueError(f"{len(plain)} bytes, header says {header.uncompressed_size}")
        return header, unpack(plain)
    except Exception as exc:
        raise WalCorruption(
            f"checkpoint body does not decode: {exc}", file=str(path), offset=HEADER_SIZE
        ) from None


def checkpoint_time(path: Path) -> float:
    """When a checkpoint was taken: its header timestamp, or the file's mtime if unreadable."""
    try:
        return read_header(path).timestamp_ns / 1e9
    except WalError:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0


def expired_checkpoints(
    paths: list[Path], times: list[float], *, now: float, retention: float, keep: int
) -> list[Path]:
    """Checkpoints retention deletes: older than ``retention``, never the newest ``keep``."""
    candidates = list(zip(paths, times, strict=True))[: max(len(paths) - keep, 0)]
    return [path for path, taken in candidates if now - taken > retention]
