"""What amber.langgraph stores, encoded and checked: pure functions, no I/O.

A LangGraph checkpoint is stored as

* one *body* row (``lg_checkpoints``): the checkpoint without its channel values, its
  metadata and its parent's id, in the strict serializer's msgpack;
* one *blob* row per channel version (``lg_blobs``), written when the version is new
  (a checkpoint names the versions it needs; unchanged channels are not written again);
* one row per pending write (``lg_writes``).

Each row carries a SHA-256 over what it names and its stored bytes, so a flipped bit,
a truncated value or a row moved under another name is found before anything is
decoded. Bytes of ``COMPRESS_MIN`` or more are stored zstd-compressed with their
decompressed size recorded, which bounds decompression (``codec.unpack``).

The *hot copy* of a namespace's newest checkpoint (Redis) is its body and every blob
it needs in one msgpack list, sealed by ``codec.seal`` under the row's sequence and
stored as it is (``codec.store``), not compressed a second time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ormsgpack

from amber import codec
from amber.engines.overlap import text_element
from amber.errors import CheckpointCorrupt

COMPRESS_MIN = 1024
"""Stored bytes at least this long are zstd-compressed (below it, framing costs more)."""

HOT_FORMAT = 1
"""Version of the hot copy's layout."""

EMPTY = "empty"
"""Serialization type of a channel that has a version but no value."""


def _text(*parts: object) -> bytes:
    return "\x00".join(map(str, parts)).encode("utf-8", "surrogatepass") + b"\x00"


def pack(raw: bytes) -> tuple[bytes, int | None]:
    """``(stored bytes, decompressed size or None)``: compressed when long and it pays, at
    ``codec.pack_fast``'s level. A value of a few KB compresses by half at either level,
    and at that size the entropy coding of ``codec.pack`` cost more than the rest: a 1 KB
    channel value of records stores as 521 bytes in 4.6 us against 515 in 10.9; at 100
    KB the two levels take the same time for the same size, within 3%."""
    if len(raw) >= COMPRESS_MIN:
        packed = codec.pack_fast(raw)
        if len(packed) < len(raw):
            return packed, len(raw)
    return raw, None


def unpack(data: bytes, size: int | None) -> bytes:
    """Inverse of :func:`pack`, never inflating past the recorded size."""
    return data if size is None else codec.unpack(data, size)


@dataclass(slots=True)
class Blob:
    """One channel's value at one version, as stored (and, once known, decompressed)."""

    channel: str
    version: str
    type: str
    data: bytes
    size: int | None
    raw: bytes | None = field(default=None, compare=False, repr=False)
    """The serialized bytes, kept once packed or unpacked: a copy held in memory is read
    again without decompressing."""
    wire: tuple[bytes, bytes] | None = field(default=None, compare=False, repr=False)
    """Channel and version as ``text[]`` elements, once :meth:`elements` made them."""

    @classmethod
    def of(cls, channel: str, version: str, typed: tuple[str, bytes]) -> Blob:
        """A blob of a serialized ``(type, bytes)`` value."""
        data, size = pack(typed[1])
        return cls(channel, version, typed[0], data, size, typed[1])

    def digest(self) -> bytes:
        """SHA-256 over channel, version, type and stored bytes."""
        return hashlib.sha256(_text(self.channel, self.version, self.type) + self.data).digest()

    def elements(self) -> tuple[bytes, bytes]:
        """Channel and version as ``text[]`` elements (``overlap.text_element``), made once:
        a blob a thread's puts keep naming is encoded for the first of them only."""
        if self.wire is None:
            self.wire = (text_element(self.channel), text_element(self.version))
        return self.wire

    def typed(self) -> tuple[str, bytes]:
        """The serialized ``(type, bytes)`` again."""
        if self.raw is None:
            self.raw = unpack(self.data, self.size)
        return self.type, self.raw

    @property
    def nbytes(self) -> int:
        """Bytes this blob holds in memory (for the cache's bound)."""
        extra = len(self.raw) if self.raw is not None and self.size is not None else 0
        return len(self.data) + extra + len(self.channel) + len(self.version) + 64


@dataclass(frozen=True, slots=True)
class Body:
    """A checkpoint without its channel values: ``{checkpoint, metadata, parent}``, stored."""

    checkpoint_id: str
    data: bytes
    size: int | None

    @classmethod
    def of(cls, checkpoint_id: str, msgpack: bytes) -> Body:
        """The body of a serialized document."""
        data, size = pack(msgpack)
        return cls(checkpoint_id, data, size)

    def digest(self) -> bytes:
        """SHA-256 over the checkpoint id and the stored bytes."""
        return hashlib.sha256(_text(self.checkpoint_id) + self.data).digest()

    def raw(self) -> bytes:
        """The serialized document."""
        return unpack(self.data, self.size)


@dataclass(frozen=True, slots=True)
class Write:
    """One pending write of a task, as stored."""

    task_id: str
    idx: int
    channel: str
    type: str
    data: bytes
    size: int | None
    task_path: str

    def digest(self) -> bytes:
        """SHA-256 over task, index, channel, type and stored bytes."""
        head = _text(self.task_id, self.idx, self.channel, self.type)
        return hashlib.sha256(head + self.data).digest()

    def typed(self) -> tuple[str, bytes]:
        """The serialized ``(type, bytes)`` again."""
        return self.type, unpack(self.data, self.size)


def checked(row: Blob | Body | Write, digest: bytes, **ids: Any) -> None:
    """Raise ``CheckpointCorrupt`` (naming ``ids``) unless ``row`` matches its stored digest."""
    if bytes(digest) != row.digest():
        what = type(row).__name__.lower()
        raise CheckpointCorrupt(f"stored checkpoint {what} does not match its checksum", **ids)


def body_document(
    checkpoint: Mapping[str, Any], metadata: Mapping[str, Any], parent_id: str | None
) -> dict[str, Any]:
    """What a body holds: the checkpoint less its channel values, metadata, parent id."""
    bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    return {"checkpoint": bare, "metadata": dict(metadata), "parent": parent_id}


def hot_copy(body: Body, blobs: Iterable[Blob]) -> bytes:
    """The hot copy's bytes (sealed by the caller): the body and every blob it needs."""
    return ormsgpack.packb(
        [
            HOT_FORMAT,
            body.checkpoint_id,
            body.data,
            body.size,
            [[b.channel, b.version, b.type, b.data, b.size] for b in blobs],
        ]
    )


def parse_hot_copy(raw: bytes) -> tuple[Body, list[Blob]]:
    """Inverse of :func:`hot_copy`; ``CodecError`` if the layout is not the one written."""
    try:
        fmt, cid, data, size, blobs = ormsgpack.unpackb(raw)
        if fmt != HOT_FORMAT or not isinstance(cid, str) or not isinstance(data, bytes):
            raise ValueError("header")
        return Body(cid, data, size), [Blob(*b[:5]) for b in blobs]
    except (ValueError, TypeError) as exc:
        raise codec.CodecError(f"hot copy has an unknown layout: {exc}") from None
