"""Pure encode and decode of WAL entries and checkpoint headers. No I/O.

WAL entry frame (all integers big-endian)::

    offset  size  field
    0       4     payload length N (u32)
    4       4     CRC-32 of the payload (u32, zlib polynomial)
    8       N     payload: msgpack array [sequence, timestamp, operation, data]

Checkpoint header, 256 bytes, followed by the zstd-compressed msgpack body::

    offset  size  field
    0       8     magic b"AMBRCKPT"
    8       2     format version (u16) = 1
    10      1     codec (u8) 1 = zstd
    11      1     zstd level used (u8)
    12      4     flags (u32) = 0
    16      8     timestamp, nanoseconds since the epoch (u64)
    24      16    checkpoint id (UUID bytes)
    40      8     compressed body size (u64)
    48      8     uncompressed body size (u64)
    56      32    SHA-256 of the compressed body
    88      8     WAL sequence the state includes (u64)
    96      156   zero padding
    252     4     CRC-32 of bytes 0..251 (u32)

msgpack, never pickle: decoding a file can never run code.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from amber.defaults import WAL_MAX_ENTRY_BYTES
from amber.errors import WalError

FRAME = struct.Struct(">II")
"""Length and CRC-32 that precede every entry payload."""

CKPT_MAGIC = b"AMBRCKPT"
CKPT_VERSION = 1
CKPT_CODEC_ZSTD = 1
HEADER_SIZE = 256
_HEADER = struct.Struct(">8sHBBIQ16sQQ32sQ")
_CRC = struct.Struct(">I")
_CRC_AT = HEADER_SIZE - _CRC.size


class Entry(NamedTuple):
    """One logged operation: its sequence, wall-clock timestamp, name and data."""

    seq: int
    timestamp: float
    op: str
    data: Any


@dataclass(frozen=True, slots=True)
class Header:
    """The fixed 256-byte header of a checkpoint file."""

    checkpoint_id: uuid.UUID
    timestamp_ns: int
    wal_seq: int
    compressed_size: int
    uncompressed_size: int
    sha256: bytes
    level: int
    version: int = CKPT_VERSION


def pack(value: Any) -> bytes:
    """Serialize with msgpack; a value msgpack cannot hold is a ``WalError``."""
    try:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise WalError(f"value cannot be serialized with msgpack: {exc}") from None


def unpack(blob: bytes | memoryview) -> Any:
    """Deserialize msgpack (raises msgpack's own errors; callers add the file context)."""
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


class EntryEncoder:
    """Frames entries, reusing one msgpack packer (so: one encoder per thread or lock)."""

    def __init__(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)

    def encode(self, seq: int, timestamp: float, op: str, data: Any) -> bytes:
        """Return the framed bytes of one entry; ``WalError`` if data is not msgpack-able."""
        try:
            payload: bytes = self._packer.pack((seq, timestamp, op, data))
        except (TypeError, ValueError, OverflowError) as exc:
            raise WalError(f"data cannot be serialized with msgpack: {exc}", op=op) from None
        if len(payload) > WAL_MAX_ENTRY_BYTES:
            raise WalError("entry too large", size=len(payload), limit=WAL_MAX_ENTRY_BYTES)
        return FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def encode_entry(seq: int, timestamp: float, op: str, data: Any) -> bytes:
    """Return the framed bytes of one entry."""
    return EntryEncoder().encode(seq, timestamp, op, data)


def _decode_payload(payload: memoryview) -> Entry | None:
    try:
        seq, timestamp, op, data = unpack(payload)
    except Exception:
        return None
    if type(seq) is not int or type(op) is not str or type(timestamp) not in (int, float):
        return None
    return Entry(seq, float(timestamp), op, data)


def decode_frame(buf: memoryview, offset: int) -> tuple[Entry, int] | None:
    """Decode the entry framed at ``offset``; return it and the next offset, or None if bad."""
    end = offset + FRAME.size
    if end > len(buf):
        return None
    length, crc = FRAME.unpack_from(buf, offset)
    if length > WAL_MAX_ENTRY_BYTES or end + length > len(buf):
        return None
    payload = buf[end : end + length]
    if zlib.crc32(payload) != crc:
        return None
    entry = _decode_payload(payload)
    return None if entry is None else (entry, end + length)


@dataclass(frozen=True, slots=True)
class Scan:
    """What scanning a segment found: its intact frames, and where and why it stopped."""

    entries: list[Entry]
    count: int
    end: int
    problem: str | None


def scan_frames(buf: bytes | memoryview, first_seq: int, *, decode: bool = True) -> Scan:
    """Check consecutive frames (length, CRC; with ``decode`` also payload and sequence).

    Stops at the first bad frame. Without ``decode`` only ``count`` is filled in.
    """
    view = memoryview(buf)
    entries: list[Entry] = []
    size, offset, count = len(view), 0, 0
    unpack_from, crc32, limit = FRAME.unpack_from, zlib.crc32, WAL_MAX_ENTRY_BYTES
    while offset < size:
        end = offset + FRAME.size
        if end > size:
            return Scan(entries, count, offset, "torn frame header")
        length, crc = unpack_from(view, offset)
        if length > limit or end + length > size or crc32(view[end : end + length]) != crc:
            return Scan(entries, count, offset, "bad length or checksum")
        if decode:
            entry = _decode_payload(view[end : end + length])
            if entry is None:
                return Scan(entries, count, offset, "entry does not decode")
            if entry.seq != first_seq + count:
                problem = f"sequence {entry.seq} where {first_seq + count} was expected"
                return Scan(entries, count, offset, problem)
            entries.append(entry)
        count += 1
        offset = end + length
    return Scan(entries, count, offset, None)


def valid_frame_after(buf: bytes | memoryview, offset: int, min_seq: int) -> int | None:
    """Offset of the first intact frame after ``offset`` with seq >= ``min_seq``, if any.

    Used to tell a torn tail (nothing intact follows) from damage in the middle.
    """
    view = memoryview(buf)
    limit = len(view) - FRAME.size
    for start in range(offset + 1, limit + 1):
        length = int.from_bytes(view[start : start + 4], "big")
        if length > limit - start:
            continue
        decoded = decode_frame(view, start)
        if decoded is not None and decoded[0].seq >= min_seq:
            return start
    return None


def encode_header(header: Header) -> bytes:
    """Return the 256 bytes of a checkpoint header."""
    fixed = _HEADER.pack(
        CKPT_MAGIC,
        header.version,
        CKPT_CODEC_ZSTD,
        header.level,
        0,
        header.timestamp_ns,
        header.checkpoint_id.bytes,
        header.compressed_size,
        header.uncompressed_size,
        header.sha256,
        header.wal_seq,
    )
    body = fixed.ljust(_CRC_AT, b"\0")
    return body + _CRC.pack(zlib.crc32(body))


def decode_header(raw: bytes) -> Header:
    """Parse a checkpoint header; any inconsistency is a ``ValueError`` naming it."""
    if len(raw) != HEADER_SIZE:
        raise ValueError(f"header is {len(raw)} bytes, expected {HEADER_SIZE}")
    (crc,) = _CRC.unpack_from(raw, _CRC_AT)
    if zlib.crc32(raw[:_CRC_AT]) != crc:
        raise ValueError("header checksum mismatch")
    magic, version, codec, level, _flags, ts, cid, csize, usize, sha, seq = _HEADER.unpack_from(raw)
    if magic != CKPT_MAGIC:
        raise ValueError(f"bad magic {magic!r}")
    if version != CKPT_VERSION:
        raise ValueError(f"unsupported checkpoint version {version}")
    if codec != CKPT_CODEC_ZSTD:
        raise ValueError(f"unknown codec {codec}")
    return Header(uuid.UUID(bytes=cid), ts, seq, csize, usize, sha, level, version)
