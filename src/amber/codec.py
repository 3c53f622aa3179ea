"""Canonical JSON for typed Redis values, and the hash of a whole agent memory.

Pure functions, no I/O. The canonical form is what snapshots store and what
hashes cover:

* bytes that are valid UTF-8 without NUL become JSON strings; any other bytes become
  ``{"b64": "..."}``, so every value round-trips byte for byte;
* hashes become ``[field, value]`` pairs sorted by field bytes, sets become
  members sorted by bytes, zsets become ``[member, score]`` pairs in Redis order
  (score, then member bytes); a list keeps its order;
* the memory hash covers key names, types and values, never TTLs (they change
  with time), so it does not depend on when, or in what order, it was read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

import orjson
import zstandard

from amber.errors import AmberError

RedisType = Literal["string", "list", "hash", "set", "zset"]
REDIS_TYPES: tuple[RedisType, ...] = get_args(RedisType)

StringValue = bytes
ListValue = list[bytes]
HashValue = dict[bytes, bytes]
SetValue = set[bytes]
ZSetValue = list[tuple[bytes, float]]
Value = StringValue | ListValue | HashValue | SetValue | ZSetValue

FORMAT_VERSION = 2
"""Version of the snapshot document written now. Format 2 hashes a memory as the sum
of its keys' digests (:func:`key_digest`), so the hash follows a change of a few keys
in O(changes); format 1 (read, never written) hashed the whole sorted document."""

FORMATS = (1, 2)
"""Snapshot formats this code reads."""

NO_TTL = -1
"""``ttl_ms`` of a key that never expires."""


class CodecError(AmberError, ValueError):
    """Bytes or a document do not decode to a valid snapshot; the message says where."""


@dataclass(frozen=True)
class Entry:
    """One Redis key of a memory: its type, value, and remaining TTL in ms (-1: none)."""

    type: RedisType
    value: Value
    ttl_ms: int = NO_TTL


Memory = Mapping[str, Entry]
"""A whole agent memory: key name (without prefix) → entry."""


# -- bytes ------------------------------------------------------------------------------
def encode_bytes(raw: bytes) -> str | dict[str, str]:
    """Text when ``raw`` is UTF-8 without NUL, else ``{"b64": ...}``.

    NUL is valid UTF-8, but PostgreSQL's JSONB cannot hold ``\u0000``.
    """
    if b"\x00" not in raw:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(raw).decode("ascii")}


def decode_bytes(doc: object, where: str = "value") -> bytes:
    """Inverse of :func:`encode_bytes`."""
    if isinstance(doc, str):
        return doc.encode("utf-8")
    if isinstance(doc, dict) and set(doc) == {"b64"} and isinstance(doc["b64"], str):
        try:
            return base64.b64decode(doc["b64"], validate=True)
        except binascii.Error:
            raise CodecError(f"{where}: invalid base64") from None
    raise CodecError(f"{where}: expected a string or {{'b64': ...}}, got {type(doc).__name__}")


def _encode_score(score: float) -> float | str:
    if math.isinf(score):
        return "inf" if score > 0 else "-inf"
    if math.isnan(score):
        raise CodecError("zset score is NaN")
    return float(score)


def _decode_score(doc: object, where: str) -> float:
    if doc == "inf":
        return math.inf
    if doc == "-inf":
        return -math.inf
    if isinstance(doc, int | float) and not isinstance(doc, bool) and math.isfinite(doc):
        return float(doc)
    raise CodecError(f"{where}: invalid zset score {doc!r}")


def _encode_all(values: list[bytes]) -> list[Any]:
    """``[encode_bytes(v) for v in values]``, in C when every value is plain ASCII."""
    joined = b"".join(values)
    if joined.isascii() and b"\x00" not in joined:
        return list(map(bytes.decode, values))
    return [encode_bytes(v) for v in values]


def _decode_all(docs: list[Any], where: str) -> list[bytes]:
    """``[decode_bytes(d) for d in docs]``, in C when every item is text."""
    try:
        return list(map(str.encode, docs))
    except TypeError:
        return [decode_bytes(d, f"{where}[{i}]") for i, d in enumerate(docs)]


# -- JSON documents a user hands over --------------------------------------------------------
def json_value(value: Any, field: str, max_bytes: int) -> bytes:
    """``value`` as JSON, if PostgreSQL can store it, else ``InvalidValue`` naming
    ``field``: not JSON (an integer past 64 bits, a set, an object), larger than
    ``max_bytes`` encoded, or holding a NUL character (``jsonb`` cannot)."""
    from amber.errors import InvalidValue

    try:
        raw = orjson.dumps(value)
    except TypeError as exc:
        raise InvalidValue(f"{field} is not JSON: {exc}", field=field) from None
    if len(raw) > max_bytes:
        raise InvalidValue(f"{field} is too large", field=field, size=len(raw))
    if b"\\u0000" in raw:
        raise InvalidValue(
            f"{field} holds a NUL character (\\u0000), which PostgreSQL cannot store",
            field=field,
        )
    return raw


def json_object(value: object, field: str, max_bytes: int) -> dict[str, Any]:
    """``value`` if it is a JSON object PostgreSQL can store (see :func:`json_value`)."""
    from amber.errors import InvalidValue

    if not isinstance(value, dict):
        raise InvalidValue(f"{field} must be a JSON object (a dict)", field=field)
    json_value(value, field, max_bytes)
    return dict(value)


# -- one value --------------------------------------------------------------------------
def scalar_bytes(value: bytes | str | int | float) -> bytes:
    """The bytes Redis stores for one value written to working memory: the one encoding
    every write path (direct calls, batches, log replay) uses, the same as redis-py's
    (``str`` as UTF-8, ``int`` in decimal, ``float`` as ``repr``: 0.1 is ``b"0.1"``)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int):
        return str(int(value)).encode()
    return repr(float(value)).encode()


def encode_value(rtype: RedisType, value: Value) -> Any:
    """Canonical JSON-able form of one typed value."""
    if rtype == "string":
        return encode_bytes(cast(bytes, value))
    if rtype == "list":
        return _encode_all(cast(ListValue, value))
    if rtype == "hash":
        fields = sorted(cast(HashValue, value))
        mapping = cast(HashValue, value)
        flat = _encode_all([b for f in fields for b in (f, mapping[f])])
        return [flat[i : i + 2] for i in range(0, len(flat), 2)]
    if rtype == "set":
        return _encode_all(sorted(cast(SetValue, value)))
    if rtype == "zset":
        pairs = sorted(cast(ZSetValue, value), key=lambda p: (p[1], p[0]))
        members = _encode_all([m for m, _ in pairs])
        return [[m, _encode_score(s)] for m, (_, s) in zip(members, pairs, strict=True)]
    raise CodecError(f"unsupported Redis type {rtype!r}")


def _pairs(doc: object, where: str) -> list[list[Any]]:
    if not isinstance(doc, list) or not all(isinstance(p, list) and len(p) == 2 for p in doc):
        raise CodecError(f"{where}: expected a list of pairs")
    return doc


def decode_value(rtype: str, doc: object, where: str = "value") -> Value:
    """Inverse of :func:`encode_value`; raises ``CodecError`` on any malformed part."""
    if rtype == "string":
        return decode_bytes(doc, where)
    if rtype in ("list", "set"):
        if not isinstance(doc, list):
            raise CodecError(f"{where}: expected a list")
        items = _decode_all(doc, where)
        return items if rtype == "list" else set(items)
    if rtype == "hash":
        return {
            decode_bytes(f, f"{where}[{i}]"): decode_bytes(v, f"{where}[{i}]")
            for i, (f, v) in enumerate(_pairs(doc, where))
        }
    if rtype == "zset":
        return [
            (decode_bytes(m, f"{where}[{i}]"), _decode_score(s, f"{where}[{i}]"))
            for i, (m, s) in enumerate(_pairs(doc, where))
        ]
    raise CodecError(f"{where}: unsupported Redis type {rtype!r}")


def normalize(rtype: RedisType, value: Value) -> Value:
    """The value as :func:`decode_value` would return it (zsets in Redis order)."""
    return decode_value(rtype, encode_value(rtype, value))


# -- a whole memory ---------------------------------------------------------------------
Canonical = dict[str, tuple[RedisType, Any, int]]
"""A memory with every value in canonical JSON-able form: name → (type, value, ttl_ms)."""


def canonical(memory: Memory) -> Canonical:
    """Encode every value of a memory once; hash and document are built from this."""
    return {n: (e.type, encode_value(e.type, e.value), e.ttl_ms) for n, e in memory.items()}


_MOD = 2**256


def key_digest(name: str, rtype: str, value: Any) -> int:
    """SHA-256 of one key's name, type and canonical value, as a number."""
    raw = orjson.dumps([name, rtype, value])
    return int.from_bytes(hashlib.sha256(raw).digest(), "big")


def digest_sum(canon: Mapping[str, tuple[str, Any, int]]) -> int:
    """The sum of every key's :func:`key_digest` over a memory in canonical form, in one
    loop (a third less time than calling it per key, on 10,000 keys)."""
    dumps, sha256, number = orjson.dumps, hashlib.sha256, int.from_bytes
    return sum([number(sha256(dumps([n, t, v])).digest(), "big") for n, (t, v, _) in canon.items()])


def combine(total: int) -> str:
    """The memory hash (64 hex digits) of a sum of key digests."""
    return f"{total % _MOD:064x}"


def canonical_hash(canon: Canonical, fmt: int = FORMAT_VERSION) -> str:
    """The memory hash over names, types and encoded values (not TTLs).

    Format 2: the sum modulo 2**256 of every key's :func:`key_digest`; replacing one
    key subtracts its old digest and adds its new one. Format 1: SHA-256 of the
    sorted document.
    """
    if fmt == 1:
        doc = {name: [t, v] for name, (t, v, _) in canon.items()}
        return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return combine(digest_sum(canon))


def canonical_document(canon: Canonical) -> dict[str, Any]:
    """The snapshot document of an encoded memory."""
    return {
        "format": FORMAT_VERSION,
        "keys": {n: {"type": t, "value": v, "ttl_ms": ttl} for n, (t, v, ttl) in canon.items()},
    }


def document_hash(doc: dict[str, Any]) -> str:
    """The memory hash of a snapshot document as stored, without decoding its values.

    Equal to :func:`memory_hash` (in the document's format) of the decoded memory when
    the document is canonical; a document altered in any way (even one reordered set)
    hashes differently.
    """
    try:
        canon = {n: (item["type"], item["value"], NO_TTL) for n, item in doc["keys"].items()}
    except (KeyError, TypeError, AttributeError):
        raise CodecError("snapshot document has no well-formed 'keys' object") from None
    return canonical_hash(canon, document_format(doc))


def document_format(doc: dict[str, Any]) -> int:
    """The format of a snapshot document; ``CodecError`` for one this code cannot read."""
    fmt = doc.get("format")
    if fmt not in FORMATS:
        raise CodecError(f"snapshot format {fmt!r} is not one of {FORMATS}")
    return int(fmt)


def memory_document(memory: Memory) -> dict[str, Any]:
    """JSON-able snapshot document of a memory (TTLs included)."""
    return canonical_document(canonical(memory))


def encode_memory(memory: Memory) -> bytes:
    """Canonical JSON bytes of a memory (keys sorted)."""
    return orjson.dumps(memory_document(memory), option=orjson.OPT_SORT_KEYS)


def memory_from_document(doc: object) -> dict[str, Entry]:
    """Inverse of :func:`memory_document`; raises ``CodecError`` naming the bad key."""
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict):
        raise CodecError("snapshot document has no 'keys' object")
    document_format(doc)
    memory: dict[str, Entry] = {}
    for name, item in doc["keys"].items():
        if not isinstance(item, dict) or item.get("type") not in REDIS_TYPES:
            raise CodecError(f"key {name!r}: missing or unsupported type")
        ttl = item.get("ttl_ms", NO_TTL)
        if not isinstance(ttl, int) or isinstance(ttl, bool):
            raise CodecError(f"key {name!r}: ttl_ms is not an integer")
        rtype = cast(RedisType, item["type"])
        memory[name] = Entry(rtype, decode_value(rtype, item.get("value"), f"key {name!r}"), ttl)
    return memory


def decode_document(raw: bytes | str) -> dict[str, Any]:
    """Parse stored JSON into its document (an object), without decoding the values."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"document is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CodecError("document is not a JSON object")
    return doc


def decode_memory(raw: bytes | str) -> dict[str, Entry]:
    """Inverse of :func:`encode_memory`."""
    return memory_from_document(decode_document(raw))


def memory_hash(memory: Memory, fmt: int = FORMAT_VERSION) -> str:
    """The memory hash (hex) over key names, types and values; TTLs excluded."""
    return canonical_hash(canonical(memory), fmt)


PACK_LEVEL = 1
"""zstd level of stored snapshots and checkpoint state: a 111 KB memory stores as 35 KB,
and inserting it into PostgreSQL costs 0.28x the JSONB insert DD-011 sketched, reading
it 0.70x (bench/bench_checkpoint.py, "storing the 100-key snapshot")."""


FAST_LEVEL = -1
"""zstd's fastest level that still finds repeats (no entropy coding of literals): for a
small document made of repeated strings, as a LangGraph checkpoint's body of channel
versions, 1,357 bytes go to 490 in 3 us where :data:`PACK_LEVEL` takes 8 us for 377."""


STORE_LEVEL = -(1 << 17)
"""zstd's lowest level (``ZSTD_minCLevel``): a frame whose blocks hold the bytes as they
are. 10 KB go in about 1 us where :data:`PACK_LEVEL` takes 30 us."""


class _Contexts(threading.local):
    """One zstd compressor and decompressor per thread: making one costs 30-40 us, more
    than compressing a small value (zstd contexts are not safe to share across threads)."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=PACK_LEVEL)
        self.fast = zstandard.ZstdCompressor(level=FAST_LEVEL)
        self.storer = zstandard.ZstdCompressor(level=STORE_LEVEL)
        self.decompressor = zstandard.ZstdDecompressor()


_contexts = _Contexts()


def pack(data: bytes) -> bytes:
    """zstd-compress canonical JSON for storage; the frame records its decompressed size."""
    return _contexts.compressor.compress(data)


PACK_MIN = 1024
"""Bytes shorter than this are stored by :func:`pack_row` in a frame as they are:
compressing a save's 780-byte record took 20 us of the save to spare 300 bytes of its
row (docs/performance.md)."""


def pack_row(data: bytes) -> bytes:
    """``data`` for a PostgreSQL row: :func:`pack` when it is long enough to pay, else
    :func:`store`; :func:`unpack` reads either."""
    return store(data) if len(data) < PACK_MIN else pack(data)


def pack_fast(data: bytes) -> bytes:
    """``data`` compressed at :data:`FAST_LEVEL`: repeats found, literals left as they
    are; for small documents where :func:`pack`'s entropy coding costs more than it
    saves. :func:`unpack` reads it."""
    return _contexts.fast.compress(data)


def store(data: bytes) -> bytes:
    """``data`` in a zstd frame :func:`unpack` reads, not compressed: for a copy kept in
    Redis whose bytes are small or compressed already, where :func:`pack` would spend
    its time for nothing."""
    return _contexts.storer.compress(data)


def unpack(blob: bytes, size: int | None = None) -> bytes:
    """Inverse of :func:`pack`, bounded: never more than ``size`` bytes come out.

    ``size`` is the decompressed size recorded when the blob was written (None: only
    ``MAX_UNPACKED`` bounds it). A frame that claims another size, or would expand past
    the bound (a decompression bomb), is a ``CodecError``, before any memory is spent.
    """
    limit = MAX_UNPACKED if size is None else size
    try:
        claimed = zstandard.frame_content_size(blob)
    except zstandard.ZstdError as exc:
        raise CodecError(f"stored blob is not a valid zstd frame: {exc}") from None
    if claimed < 0 or claimed > limit or (size is not None and claimed != size):
        raise CodecError(
            f"stored blob claims {claimed} bytes decompressed; {limit} were recorded or allowed"
        )
    try:
        out = _contexts.decompressor.decompress(blob, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise CodecError(f"stored blob is not a valid zstd frame: {exc}") from None
    if len(out) != claimed:
        raise CodecError(f"stored blob decompressed to {len(out)} bytes, not {claimed}")
    return out


MAX_UNPACKED = 512 * 1024 * 1024
"""Most bytes a stored blob may decompress to when no size was recorded (Redis' own
limit on one value)."""


def unpack_memory(blob: bytes, size: int | None = None) -> dict[str, Entry]:
    """A memory as stored in the Redis secondary and PostgreSQL (zstd canonical JSON)."""
    return decode_memory(unpack(blob, size))


# -- sealed values: what amber keeps in Redis ------------------------------------------
SEAL_MAGIC = b"AMB1"
_SEQ_DIGITS = 20
_SIZE_DIGITS = 12
SEAL_HEADER = len(SEAL_MAGIC) + _SEQ_DIGITS + _SIZE_DIGITS + 64
"""Bytes before the body: magic, sequence and size in fixed-width decimal (so a Lua
script compares sequences as strings), and the SHA-256 hex of everything else."""


def seal_seq(seq: int) -> bytes:
    """A sequence as it stands in a sealed header (fixed width, so ordered as text)."""
    if not 0 <= seq < 10**_SEQ_DIGITS:
        raise CodecError(f"sequence {seq} is out of range")
    return b"%020d" % seq


def seal(seq: int, raw: bytes, packed: bytes | None = None) -> bytes:
    """``raw`` compressed, behind a header naming its sequence and size, all checksummed.

    The checksum covers the header's sequence and size as well as the body, so a
    flipped bit anywhere is found by :func:`unseal` before anything is decompressed.
    ``packed``: ``raw`` in a zstd frame already (``pack(raw)`` or ``store(raw)``).
    """
    body = pack(raw) if packed is None else packed
    fields = seal_seq(seq) + b"%012d" % len(raw)
    return SEAL_MAGIC + fields + hashlib.sha256(fields + body).hexdigest().encode() + body


def sealed_seq(blob: bytes) -> int:
    """The sequence named by a sealed value's header (not verified: see :func:`unseal`)."""
    return int(blob[len(SEAL_MAGIC) : len(SEAL_MAGIC) + _SEQ_DIGITS])


def unseal(blob: bytes) -> tuple[int, bytes]:
    """Inverse of :func:`seal`: (sequence, raw). Raises ``CodecError`` if anything is off."""
    if len(blob) < SEAL_HEADER or blob[: len(SEAL_MAGIC)] != SEAL_MAGIC:
        raise CodecError("sealed value has no amber header (truncated or foreign)")
    fields = blob[len(SEAL_MAGIC) : len(SEAL_MAGIC) + _SEQ_DIGITS + _SIZE_DIGITS]
    digest = blob[len(SEAL_MAGIC) + len(fields) : SEAL_HEADER]
    body = blob[SEAL_HEADER:]
    if hashlib.sha256(fields + body).hexdigest().encode() != digest:
        raise CodecError("sealed value does not match its checksum (corrupted)")
    if not fields.isdigit():
        raise CodecError("sealed value has a malformed header")
    seq, size = int(fields[:_SEQ_DIGITS]), int(fields[_SEQ_DIGITS:])
    return seq, unpack(body, size)


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` as hex."""
    return hashlib.sha256(data).hexdigest()
