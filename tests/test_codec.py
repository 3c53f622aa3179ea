"""The canonical codec: byte-exact round trips and order-free, TTL-free hashes."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amber import codec
from amber.codec import CodecError, Entry

raw = st.binary(max_size=40)
score = st.floats(allow_nan=False) | st.sampled_from([math.inf, -math.inf, 0.0, -0.0])


def _zset(pairs: dict[bytes, float]) -> list[tuple[bytes, float]]:
    return list(pairs.items())


values = st.one_of(
    st.tuples(st.just("string"), raw),
    st.tuples(st.just("list"), st.lists(raw, max_size=8)),
    st.tuples(st.just("hash"), st.dictionaries(raw, raw, max_size=8)),
    st.tuples(st.just("set"), st.sets(raw, max_size=8)),
    st.tuples(st.just("zset"), st.dictionaries(raw, score, max_size=8).map(_zset)),
)
names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
memories = st.dictionaries(
    names,
    st.builds(lambda tv, ttl: Entry(tv[0], tv[1], ttl), values, st.integers(-1, 10**9)),
    max_size=10,
)


@given(values)
def test_value_round_trip_is_byte_exact(tv: tuple[codec.RedisType, codec.Value]) -> None:
    rtype, value = tv
    back = codec.decode_value(rtype, codec.encode_value(rtype, value))
    if rtype == "zset":
        assert sorted(back, key=lambda p: p[0]) == sorted(value, key=lambda p: p[0])  # type: ignore[arg-type]
    else:
        assert back == value


@given(memories)
@settings(max_examples=200)
def test_memory_round_trip(memory: dict[str, Entry]) -> None:
    back = codec.decode_memory(codec.encode_memory(memory))
    assert set(back) == set(memory)
    for name, entry in memory.items():
        assert back[name].type == entry.type and back[name].ttl_ms == entry.ttl_ms
        assert back[name].value == codec.normalize(entry.type, entry.value)
    assert codec.memory_hash(back) == codec.memory_hash(memory)


@given(memories, st.randoms())
def test_hash_ignores_order_and_ttl(memory: dict[str, Entry], rnd: random.Random) -> None:
    shuffled = {}
    items = list(memory.items())
    rnd.shuffle(items)
    for name, e in items:
        value = e.value
        if e.type == "hash":
            pairs = list(e.value.items())  # type: ignore[union-attr]
            rnd.shuffle(pairs)
            value = dict(pairs)
        elif e.type == "zset":
            value = list(e.value)  # type: ignore[arg-type]
            rnd.shuffle(value)
        shuffled[name] = Entry(e.type, value, rnd.randint(-1, 10**6))
    assert codec.memory_hash(shuffled) == codec.memory_hash(memory)
    assert codec.encode_memory(shuffled) != b"" and codec.memory_hash(memory) == codec.memory_hash(
        codec.decode_memory(codec.encode_memory(shuffled))
    )


def test_hash_sees_every_value_change() -> None:
    base = {"roi": Entry("list", [b"0.15", b"0.18", b"0.12"])}
    assert codec.memory_hash(base) != codec.memory_hash({"roi": Entry("list", [b"0.15", b"0.18"])})
    assert codec.memory_hash(base) != codec.memory_hash(
        {"roi": Entry("set", {b"0.15", b"0.18", b"0.12"})}
    )
    assert codec.memory_hash(base) != codec.memory_hash({"ROI": base["roi"]})


def test_non_utf8_bytes_use_a_marker() -> None:
    assert codec.encode_bytes(b"\xff\x00") == {"b64": "/wA="}
    assert codec.encode_bytes("é".encode()) == "é"
    assert codec.decode_bytes({"b64": "/wA="}) == b"\xff\x00"


@pytest.mark.parametrize(
    "doc",
    [
        b"not json",
        b'{"keys": {}}',
        b'{"format": 1, "keys": {"k": {"type": "stream", "value": []}}}',
        b'{"format": 1, "keys": {"k": {"type": "list", "value": "x"}}}',
        b'{"format": 1, "keys": {"k": {"type": "string", "value": {"b64": "@@"}}}}',
        b'{"format": 1, "keys": {"k": {"type": "zset", "value": [["m", "high"]]}}}',
        b'{"format": 1, "keys": {"k": {"type": "hash", "value": [["f"]]}}}',
        b'{"format": 1, "keys": {"k": {"type": "string", "value": "v", "ttl_ms": "soon"}}}',
    ],
)
def test_corrupt_documents_raise_codec_error(doc: bytes) -> None:
    with pytest.raises(CodecError):
        codec.decode_memory(doc)


def test_nul_is_base64_because_jsonb_cannot_hold_it() -> None:
    assert codec.encode_bytes(b"a\x00b") == {"b64": "YQBi"}


@given(st.binary(max_size=3 * codec.PACK_MIN))
@settings(max_examples=50)
def test_a_row_is_compressed_only_when_long_and_reads_back_either_way(data: bytes) -> None:
    stored = codec.pack_row(data)
    assert codec.unpack(stored, len(data)) == data
    if len(data) < codec.PACK_MIN:
        assert stored == codec.store(data)  # as it is, in a frame: no time spent compressing
    else:
        assert stored == codec.pack(data)
