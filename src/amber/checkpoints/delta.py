"""Delta records: a checkpoint row that stores what changed since a whole row before it.

An agent's checkpoints grow with its run: a function agent's thousandth step carries a
thousand recorded results, and writing them all again at every step made step 1,000
cost twice step 1. So a row may hold only the difference from a *base*: the newest
whole row of the same agent that this process wrote. The difference is found on the
encoded bytes (``Checkpoint.fields``), so it is exact whatever the agent did to its
objects:

* a field whose bytes are the base's is left out;
* a list or object whose bytes are the base's with entries added at the end
  (``[a,b]`` then ``[a,b,c]``) stores only the entries added;
* any other change stores the field whole, and a field the base had and the record
  has not is named as dropped.

A delta names its base's sequence, id and checksum; reading it takes the base row too
(one join), checks both, and folds. Deltas are cumulative (each applies to the base,
never to another delta), so a read is at most two rows. A delta is written only while
it stays small (``DELTA_MAX_BYTES``, and under half the whole record); past that the
row is whole and becomes the next base. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from amber import codec
from amber.checkpoints.model import decode_doc, join_fields
from amber.errors import CheckpointCorrupt
from amber.lru import BytesLRU

DELTA_MAX_BYTES = 4096
"""Largest delta record written: past it, the row is whole and the next base. Deltas
are cumulative, so this bounds what every row between two whole rows carries."""

DELTA_MIN_WHOLE = 1024
"""Records smaller than this are written whole without trying a delta: a delta's own
header (its base's id and checksum, the fields that change at every step) is about 300
bytes, so it would not be under half of them."""

BASES_MAX_BYTES = 64 * 1024 * 1024
"""Encoded bases kept in a process, at most (the least recently used go first)."""

DELTA_FORMAT = "delta-1"
"""A delta record's ``format``. A whole record's is ``RECORD_FORMAT``, which
``Checkpoint.to_doc`` sets over any field of that name: no record is mistaken for the
other."""


@dataclass(frozen=True)
class Base:
    """A whole row this process committed, as the next rows' deltas apply to it."""

    analysis_id: str
    agent_type: str
    seq: int
    checkpoint_id: str
    sha256: str
    fields: dict[str, bytes]
    steps: int
    """Its completed subtasks: a delta's ``completed_subtasks`` column holds the rest."""

    @property
    def size(self) -> int:
        """Its encoded bytes, as ``Bases`` counts them against its bound."""
        return sum(len(v) for v in self.fields.values())


@dataclass(frozen=True)
class Record:
    """What one checkpoint row stores of its record."""

    raw: bytes
    """The document stored (whole, or a delta on ``base``)."""
    fields: dict[str, bytes]
    whole_size: int
    """The whole record's encoded size (a delta's own is ``len(raw)``)."""
    base: Base | None
    """The whole row a delta applies to; None: this row is whole."""

    def steps(self, completed: list[str]) -> list[str]:
        """The row's ``completed_subtasks`` column: a delta's are those after its base's."""
        return completed if self.base is None else completed[self.base.steps :]


def _appended(old: bytes, new: bytes) -> bytes | None:
    """``new`` as the JSON array or object ``old`` with entries added at its end: those
    entries, as an array or object of their own; None when it is not that."""
    if len(new) <= len(old) or old[:1] not in (b"[", b"{") or old[:1] != new[:1]:
        return None
    n = len(old) - 1  # old without its closing bracket: whole entries, then ',' in new
    if n == 1:  # old was empty
        return new
    if new[n] != ord(",") or not new.startswith(memoryview(old)[:n]):  # no copy of old
        return None
    return old[:1] + new[n + 1 :]


def diff(base: Base, fields: dict[str, bytes]) -> tuple[bytes, set[str]]:
    """The delta record that folds ``base`` into the record encoded as ``fields``, and
    the fields it restates whole."""
    changed: dict[str, orjson.Fragment] = {}
    appended: dict[str, orjson.Fragment] = {}
    for name, new in fields.items():
        old = base.fields.get(name)
        if old == new:
            continue
        tail = _appended(old, new) if old is not None else None
        if tail is not None:
            appended[name] = orjson.Fragment(tail)
        else:
            changed[name] = orjson.Fragment(new)
    raw = orjson.dumps(
        {
            "format": DELTA_FORMAT,
            "base": base.seq,
            "base_id": base.checkpoint_id,
            "base_sha256": base.sha256,
            "set": changed,
            "append": appended,
            "drop": [name for name in base.fields if name not in fields],
        }
    )
    return raw, set(changed)


def record(base: Base | None, fields: dict[str, bytes]) -> Record:
    """The row's record: a delta on ``base`` when one is small enough, else whole. A
    delta that would restate the steps (they were not only added to) is never written:
    its row's ``completed_subtasks`` column could not be the steps after the base's."""
    whole = sum(len(v) for v in fields.values())
    if base is not None and whole >= DELTA_MIN_WHOLE:
        raw, restated = diff(base, fields)
        if (
            len(raw) <= DELTA_MAX_BYTES
            and 2 * len(raw) < whole
            and "completed_subtasks" not in restated
        ):
            return Record(raw, fields, whole, base)
    return Record(join_fields(fields), fields, whole, None)


def is_delta(doc: dict[str, Any]) -> bool:
    """Whether a stored document is a delta record (else it is whole)."""
    return doc.get("format") == DELTA_FORMAT


def value_of(doc: dict[str, Any], name: str) -> Any:
    """Field ``name`` of a stored document, whole or delta (every delta sets ``seq`` and
    ``checkpoint_id``, which always change); None if it does not say."""
    return (
        doc["set"].get(name)
        if is_delta(doc) and isinstance(doc.get("set"), dict)
        else (doc.get(name))
    )


def fold(
    delta: dict[str, Any], base: dict[str, Any], base_id: str, base_sha256: str
) -> dict[str, Any]:
    """The whole record of ``delta`` on ``base`` (the row it names, whose id and checksum
    are ``base_id``, ``base_sha256``); ``CheckpointCorrupt`` if it is not that row's, or
    the delta does not apply."""
    if str(delta.get("base_id")) != str(base_id) or delta.get("base_sha256") != base_sha256:
        raise CheckpointCorrupt(
            f"delta record names base {delta.get('base_id')}, and its row is {base_id}"
            " with another checksum"
        )
    changed, appended, dropped = delta.get("set"), delta.get("append"), delta.get("drop")
    if not (isinstance(changed, dict) and isinstance(appended, dict) and isinstance(dropped, list)):
        raise CheckpointCorrupt("delta record is malformed")
    doc = {k: v for k, v in base.items() if k not in dropped}
    doc.update(changed)
    for name, tail in appended.items():
        old = doc.get(name)
        if isinstance(old, list) and isinstance(tail, list):
            doc[name] = old + tail
        elif isinstance(old, dict) and isinstance(tail, dict) and not old.keys() & tail.keys():
            doc[name] = {**old, **tail}
        else:
            raise CheckpointCorrupt(f"delta record's entries for {name!r} do not apply")
    return doc


BaseRow = tuple[Any, bytes | None, str | None, int | None]
"""A base row as the join gives it: id, state, checksum, size (all None: no such row)."""


def load(state: bytes, size: int, digest: str, base: BaseRow) -> dict[str, Any]:
    """The whole record of one row: its state checked against its checksum, and a delta
    folded on its ``base`` row. ``CheckpointCorrupt`` (or ``CodecError``) if either is
    unsound, or the base is missing."""
    return whole(decode_doc(codec.unpack(state, size), digest), base)


def whole(doc: dict[str, Any], base: BaseRow) -> dict[str, Any]:
    """``doc`` itself when it is whole; a delta folded on its ``base`` row, checked."""
    if not is_delta(doc):
        return doc
    bid, bstate, bdigest, bsize = base
    if bstate is None or bdigest is None:
        raise CheckpointCorrupt(f"delta record's base row {doc.get('base')} is missing")
    record = decode_doc(codec.unpack(bstate, bsize), bdigest)
    if is_delta(record):
        raise CheckpointCorrupt(f"delta record's base row {doc.get('base')} is a delta")
    return fold(doc, record, str(bid), bdigest)


class Bases:
    """Each agent's base in this process: the newest whole row it committed here."""

    def __init__(self, max_bytes: int = BASES_MAX_BYTES) -> None:
        self._bases: BytesLRU[str, Base] = BytesLRU(max_bytes)

    def get(self, agent_id: str, analysis_id: str, agent_type: str, seq: int) -> Base | None:
        """The agent's base for its checkpoint ``seq``: of the same analysis and agent
        type, and older."""
        base = self._bases.get(agent_id)
        if base is None or (base.analysis_id, base.agent_type) != (analysis_id, agent_type):
            return None
        return base if base.seq < seq else None

    def keep(self, agent_id: str, base: Base) -> None:
        """``base`` is the agent's newest whole row now."""
        self._bases.put(agent_id, base, base.size)

    def forget(self, agent_id: str) -> None:
        """Write the agent's next row whole (its base is gone, or in doubt)."""
        self._bases.drop(agent_id)
