"""Pure encode/decode of WAL frames and checkpoint headers."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amber.errors import WalError
from amber.wal.format import (
    FRAME,
    HEADER_SIZE,
    Header,
    decode_frame,
    decode_header,
    encode_entry,
    encode_header,
    scan_frames,
    valid_frame_after,
)

msgpackable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(
    seq=st.integers(min_value=0, max_value=2**63),
    ts=st.floats(min_value=0, max_value=4e9),
    op=st.text(min_size=1),
    data=msgpackable,
)
def test_entry_round_trip(seq: int, ts: float, op: str, data: object) -> None:
    frame = encode_entry(seq, ts, op, data)
    decoded = decode_frame(memoryview(frame), 0)
    assert decoded is not None
    entry, end = decoded
    assert end == len(frame)
    assert (entry.seq, entry.timestamp, entry.op, entry.data) == (seq, ts, op, data)


@given(st.lists(msgpackable, max_size=20), st.integers(min_value=1, max_value=10**6))
def test_scan_decodes_consecutive_frames(datas: list[object], first: int) -> None:
    blob = b"".join(encode_entry(first + i, 1.0, "op", d) for i, d in enumerate(datas))
    scan = scan_frames(blob, first)
    assert scan.problem is None and scan.end == len(blob)
    assert [e.data for e in scan.entries] == datas


@given(st.binary(max_size=64), st.integers(min_value=0, max_value=100))
def test_decoding_arbitrary_bytes_never_raises(blob: bytes, first: int) -> None:
    scan = scan_frames(blob, first)
    assert scan.end <= len(blob)


def test_scan_reports_sequence_out_of_order() -> None:
    blob = encode_entry(1, 0.0, "a", 1) + encode_entry(3, 0.0, "a", 3)
    scan = scan_frames(blob, 1)
    assert len(scan.entries) == 1 and scan.problem is not None and "sequence 3" in scan.problem


def test_valid_frame_after_finds_the_next_intact_frame() -> None:
    a, b = encode_entry(1, 0.0, "a", "x" * 30), encode_entry(2, 0.0, "a", "y")
    damaged = bytearray(a + b)
    damaged[FRAME.size + 3] ^= 0x01
    assert valid_frame_after(bytes(damaged), 0, 2) == len(a)
    assert valid_frame_after(a[:-1], 0, 1) is None


def test_unserializable_data_is_a_wal_error() -> None:
    with pytest.raises(WalError, match="msgpack"):
        encode_entry(1, 0.0, "op", {"x": object()})
    with pytest.raises(WalError):
        encode_entry(1, 0.0, "op", 2**70)


headers = st.builds(
    Header,
    checkpoint_id=st.uuids(),
    timestamp_ns=st.integers(min_value=0, max_value=2**64 - 1),
    wal_seq=st.integers(min_value=0, max_value=2**64 - 1),
    compressed_size=st.integers(min_value=0, max_value=2**64 - 1),
    uncompressed_size=st.integers(min_value=0, max_value=2**64 - 1),
    sha256=st.binary(min_size=32, max_size=32),
    level=st.integers(min_value=1, max_value=22),
)


@given(headers)
def test_header_round_trip(header: Header) -> None:
    raw = encode_header(header)
    assert len(raw) == HEADER_SIZE
    assert decode_header(raw) == header


@given(headers, st.integers(min_value=0, max_value=HEADER_SIZE * 8 - 1))
def test_any_bit_flip_in_a_header_is_detected(header: Header, bit: int) -> None:
    raw = bytearray(encode_header(header))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(ValueError):
        decode_header(bytes(raw))


def test_header_layout_is_fixed() -> None:
    h = Header(uuid.UUID(int=1), 2, 3, 4, 5, b"\x07" * 32, 9)
    raw = encode_header(h)
    assert raw[:8] == b"AMBRCKPT"
    assert raw[8:10] == b"\x00\x01"  # version 1
    assert raw[10] == 1 and raw[11] == 9  # zstd, level 9
    assert int.from_bytes(raw[88:96], "big") == 3  # WAL sequence
    assert raw[96:252] == bytes(156)
