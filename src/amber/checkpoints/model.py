"""The checkpoint record (DD-011) and its encoding. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from amber import codec
from amber.errors import CheckpointCorrupt, InvalidValue

RECORD_FORMAT = 1
"""Version of the checkpoint document layout (not the agent's version)."""


@dataclass
class Checkpoint:
    """An agent's execution state at a subtask boundary."""

    checkpoint_id: str
    analysis_id: str
    stock_ticker: str
    agent_type: str
    agent_id: str
    checkpoint_time: datetime
    agent_version: str
    progress_pct: float = 0.0
    current_subtask: str | None = None
    completed_subtasks: list[str] = field(default_factory=list)
    pending_subtasks: list[str] = field(default_factory=list)
    interim_results: dict[str, Any] = field(default_factory=dict)
    step_functions: dict[str, str] = field(default_factory=dict)
    """The function each completed step ran (``module:qualname``), by step key."""
    agent_config: dict[str, Any] = field(default_factory=dict)
    retry_count: int = 0
    failure_reason: str | None = None
    error_details: dict[str, Any] | None = None
    l1_snapshot_hash: str | None = None
    l1_snapshot_seq: int | None = None
    l1_snapshot_epoch: str | None = None
    l1_snapshot_keys: int | None = None
    seq: int = 0
    """Position in the agent's chain of checkpoints (1, 2, 3, ...); see ``schema/sql.py``."""
    writer: str | None = None
    """The run that wrote it (``host:pid:token``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields added by agent-version migrations that this layout does not name."""

    def to_doc(self) -> dict[str, Any]:
        """The record as a JSON-able document (extra fields at top level)."""
        doc = {name: getattr(self, name) for name in _field_names()}
        doc["checkpoint_time"] = self.checkpoint_time.astimezone(UTC).isoformat()
        extra = doc.pop("extra")
        doc.update(extra)
        doc["format"] = RECORD_FORMAT
        return doc

    def fields(self, known: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
        """Each field of the document as JSON bytes, in field-name order; raises
        ``InvalidValue`` naming a field that is not JSON. Nested objects keep their
        insertion order, so a dict that only gained entries encodes as its old bytes
        plus theirs (what a delta record relies on: ``checkpoints/delta.py``). A field
        named in ``known`` is taken as those bytes (``checkpoints/growing.py``), not
        encoded."""
        encoded: dict[str, bytes] = {}
        for name, value in sorted(self.to_doc().items()):
            given = known.get(name) if known else None
            if given is not None:
                encoded[name] = given
                continue
            try:
                encoded[name] = orjson.dumps(value)
            except TypeError as exc:
                raise InvalidValue(
                    f"checkpoint field {name!r} is not JSON-serializable: {exc}",
                    agent_id=self.agent_id,
                    field=name,
                ) from None
        return encoded

    def encode(self) -> bytes:
        """The whole record as JSON bytes; raises ``InvalidValue`` naming a field that is
        not JSON."""
        return join_fields(self.fields())

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Checkpoint:
        """Inverse of :meth:`to_doc`; raises ``CheckpointCorrupt`` if fields are missing."""
        doc = dict(doc)
        doc.pop("format", None)
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in doc.items() if k in names}
        extra = {k: v for k, v in doc.items() if k not in names}
        try:
            known["checkpoint_time"] = datetime.fromisoformat(known["checkpoint_time"])
            return cls(**known, extra=extra)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorrupt(f"checkpoint document is malformed: {exc}") from None


@functools.cache
def _field_names() -> tuple[str, ...]:
    """``Checkpoint``'s field names, in order (``dataclasses.fields`` builds them anew)."""
    return tuple(f.name for f in dataclasses.fields(Checkpoint))


def join_fields(fields: dict[str, bytes]) -> bytes:
    """One JSON object of fields already encoded (``Checkpoint.fields``)."""
    return b"{" + b",".join(_member(name) + raw for name, raw in fields.items()) + b"}"


@functools.lru_cache(maxsize=1024)
def _member(name: str) -> bytes:
    """A field's name as a JSON object member begins (``"name":``), encoded once."""
    return orjson.dumps(name) + b":"


def decode_doc(raw: bytes, expected_sha256: str | None = None) -> dict[str, Any]:
    """Parse canonical bytes, checking their SHA-256 when one is given."""
    if expected_sha256 is not None and codec.sha256_hex(raw) != expected_sha256:
        raise CheckpointCorrupt("checkpoint checksum does not match")
    try:
        return codec.decode_document(raw)
    except codec.CodecError as exc:
        raise CheckpointCorrupt(f"checkpoint {exc}") from None


def seal(cp: Checkpoint, raw: bytes, packed: bytes | None = None) -> bytes:
    """The Redis backup value: ``raw`` (the encoded ``cp``; ``packed``: it compressed,
    when the caller has that already) sealed with the checkpoint's sequence and a
    checksum over header and body."""
    return codec.seal(cp.seq, raw, packed)


def unseal(blob: bytes) -> tuple[int, dict[str, Any]]:
    """Inverse of :func:`seal`, verified: (sequence, document); raises ``CheckpointCorrupt``."""
    try:
        seq, raw = codec.unseal(blob)
    except codec.CodecError as exc:
        raise CheckpointCorrupt(f"checkpoint backup: {exc}") from None
    return seq, decode_doc(raw)


def now() -> datetime:
    """The current UTC time."""
    return datetime.now(UTC)
