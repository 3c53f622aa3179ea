"""A snapshot as one tier holds it (``Loaded``), and a chain of PostgreSQL snapshot rows
(a whole snapshot, then deltas) folded into the memory each row records."""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from amber import codec
from amber.codec import CodecError, Entry
from amber.memory.snapshot import Canon
from amber.schema import sql

log = logging.getLogger("amber.memory")


@dataclass(frozen=True)
class Loaded:
    """A snapshot as read from one tier, before it is trusted."""

    source: str
    canon: dict[str, Canon]
    """Its keys in canonical form, as stored (``memory`` decodes them)."""
    hash: str
    """The hash recorded when the snapshot was taken."""
    seq: int
    stored_hash: str | None = None
    """The hash of the document as read back (None: computed when asked, see
    :meth:`actual_hash`)."""
    epoch: str | None = None
    """The incarnation of the memory the snapshot was taken of."""
    fmt: int = codec.FORMAT_VERSION
    """The snapshot format ``hash`` was computed in."""
    unchecked: bool = False
    """Its keys are not hashed yet (``stored_hash`` is None): :meth:`actual_hash` does it
    over ``canon``, which a restore runs while Redis writes the keys."""

    def actual_hash(self) -> str:
        """The hash its keys have, as read: ``stored_hash``, else computed (over ``canon``
        when ``unchecked``, else over the decoded ``memory``)."""
        if self.stored_hash is not None:
            return self.stored_hash
        if self.unchecked:
            return codec.combine(codec.digest_sum(self.canon))
        return codec.memory_hash(self.memory)

    @functools.cached_property
    def memory(self) -> dict[str, Entry]:
        """Its keys as entries, decoded once when first asked for; ``CodecError`` if a
        value is malformed."""
        decode = codec.decode_value
        return {
            n: Entry(t, decode(t, v, f"key {n!r}"), ttl) for n, (t, v, ttl) in self.canon.items()
        }


def loaded_canon(
    source: str, canon: dict[str, Canon], total: int, recorded: str, seq: int, epoch: str | None
) -> Loaded:
    """A snapshot from canonical keys (checked by ``canon_of``) whose hash was already
    computed; its values are decoded when asked for (a restore writes them as they are)."""
    return Loaded(source, canon, recorded, seq, codec.combine(total), epoch)


def canon_of(name: str, item: Any) -> Canon:
    """One key of a stored document as (type, value, ttl); ``CodecError`` if malformed."""
    if not isinstance(item, dict) or item.get("type") not in codec.REDIS_TYPES:
        raise CodecError(f"key {name!r}: missing or unsupported type")
    ttl = item.get("ttl_ms", codec.NO_TTL)
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        raise CodecError(f"key {name!r}: ttl_ms is not an integer")
    return (item["type"], item.get("value"), ttl)


def canon_all(items: dict[str, Any]) -> dict[str, Canon]:
    """``canon_of`` of every key of a stored document, in one loop (10,000 keys are read
    at a restore); ``CodecError`` names the first malformed one."""
    out: dict[str, Canon] = {}
    known, no_ttl = codec.REDIS_TYPES, codec.NO_TTL
    for name, item in items.items():
        if type(item) is dict:
            rtype, ttl = item.get("type"), item.get("ttl_ms", no_ttl)
            if rtype in known and type(ttl) is int:
                out[name] = (rtype, item.get("value"), ttl)
                continue
        out[name] = canon_of(name, item)  # raises, saying what is wrong
    return out


@dataclass(frozen=True)
class _Row:
    """One row of a folded chain: what its snapshot needs besides the keys."""

    seq: int
    recorded: str
    l1_seq: int
    epoch: str | None
    fmt: int
    total: int | None
    """The sum of its keys' digests, its hash checked (None: not checked yet; see
    :meth:`FoldedChain.loaded`)."""
    undo: list[tuple[str, Canon | None]]
    """Each key this row's delta touched, as it was in the row before (None: absent)."""


class FoldedChain:
    """A chain of PostgreSQL snapshot rows applied in order: the newest row's keys in
    canonical form, and what it takes to step back to any older row. Rows become
    :class:`Loaded` snapshots only when asked, newest first in the usual case, so a
    long chain of deltas on a big memory costs one pass, not one copy per row."""

    def __init__(self) -> None:
        self.canon: dict[str, Canon] = {}
        self.rows: list[_Row] = []

    def __len__(self) -> int:
        return len(self.rows)

    def loaded(self, k: int, defer: bool = False) -> Loaded:
        """Row ``k``'s snapshot (0: the whole one; -1: the newest); ``CodecError`` when
        the memory it rebuilds does not hash to what the row recorded. With ``defer``, a
        row folded unchecked in the current format comes back ``unchecked``: whoever
        uses it checks it."""
        k %= len(self.rows)
        canon = self.canon
        if k < len(self.rows) - 1:
            canon = dict(canon)
            for row in reversed(self.rows[k + 1 :]):
                _undo(canon, row.undo)
        row = self.rows[k]
        total = row.total
        if total is None and defer and row.fmt == codec.FORMAT_VERSION:
            return Loaded("postgresql_checkpoint", canon, row.recorded, row.l1_seq,
                          epoch=row.epoch, unchecked=True)  # fmt: skip
        if total is None:  # folded unchecked (see fold_chain): checked now, whole
            total = codec.digest_sum(canon)
            if codec.combine(total) != row.recorded:
                raise CodecError(f"snapshot of row {row.seq} does not match its recorded hash")
        loaded = loaded_canon(
            "postgresql_checkpoint", canon, total, row.recorded, row.l1_seq, row.epoch
        )
        if row.fmt != codec.FORMAT_VERSION:  # its document's hash was checked as folded
            loaded = dataclasses.replace(loaded, stored_hash=row.recorded)
        return dataclasses.replace(loaded, fmt=row.fmt)


def _undo(canon: dict[str, Canon], undo: list[tuple[str, Canon | None]]) -> None:
    """Put back in ``canon`` what one delta replaced (None: the key was absent)."""
    for n, old in reversed(undo):
        if old is None:
            canon.pop(n, None)
        else:
            canon[n] = old


def chain_rows(
    conn: psycopg.Connection[Any], analysis_id: str, agent_type: str, below: int
) -> list[tuple[Any, ...]]:
    """The rows of an agent's newest snapshot chain below checkpoint ``below``, as
    :func:`fold_chain` takes them (``sql.SNAPSHOT_CHAIN``). Read in binary: a snapshot's
    bytes come as they are stored, not as hex for the client to decode (about 2 ms of a
    10,000-key memory)."""
    params = {"a": analysis_id, "t": agent_type, "below": below}
    return conn.execute(sql.SNAPSHOT_CHAIN, params, binary=True).fetchall()


def fold_chain(
    rows: list[tuple[Any, ...]], check_newest: bool = True
) -> tuple[FoldedChain, str | None]:
    """The snapshots a chain of PostgreSQL rows holds, oldest first, each one verified
    (or, without ``check_newest``, left for whoever takes it to verify).

    ``rows`` (seq, blob, size, hash, l1 seq, epoch, base) start with a whole snapshot;
    each later row is a delta on the one before. The chain is first applied whole and
    only the newest row's hash checked: the usual case, one digest per key. An older
    row's hash is checked when its snapshot is asked for. When that first pass fails
    (a row that is corrupt, does not apply, or a newest row that does not match), the
    chain is applied again checking every row's hash as it goes (O(changes) per row,
    the hash being a sum of key digests), and stops at the first row that fails,
    saying why.

    Without ``check_newest`` the first pass leaves the newest row's hash to be checked
    by whoever takes its snapshot (:meth:`FoldedChain.loaded`, a restore while Redis
    writes it); an older row is then checked when its snapshot is taken.
    """
    fast = _fold(rows, each=False, check_newest=check_newest)
    if fast[1] is None:  # that pass fails whole, never part of the chain
        return fast
    return _fold(rows, each=True)


def _fold(
    rows: list[tuple[Any, ...]], each: bool, check_newest: bool = True
) -> tuple[FoldedChain, str | None]:
    """``fold_chain``'s pass: with ``each`` every row's hash is checked as it is applied,
    else only the newest row's (with ``check_newest``), once the chain is applied (any
    failure then drops the whole chain: the caller folds again, checking each row)."""
    chain = FoldedChain()
    error: str | None = None
    canon = chain.canon
    digests: dict[str, int] = {}
    total: int | None = None
    prev = None
    for seq, blob, size, recorded, l1_seq, epoch, base in rows:
        undo: list[tuple[str, Canon | None]] = []
        try:
            doc = codec.decode_document(codec.unpack(blob, size))
            fmt = codec.document_format(doc)
            if base is None:
                keys = doc.get("keys")
                if not isinstance(keys, dict):
                    raise CodecError("snapshot document has no 'keys' object")
                canon.update(canon_all(keys))
                if each:
                    digests = {n: codec.key_digest(n, c[0], c[1]) for n, c in canon.items()}
                    total = sum(digests.values())
                    actual = codec.combine(total) if fmt == 2 else codec.document_hash(doc)
                elif fmt != codec.FORMAT_VERSION:
                    raise CodecError(f"snapshot format {fmt}: its hash is checked row by row")
            else:
                if base != prev or doc.get("base") != base:
                    raise CodecError(f"delta of row {seq} applies to row {base}, not {prev}")
                sets, dels = doc.get("set"), doc.get("del")
                if not isinstance(sets, dict) or not isinstance(dels, list):
                    raise CodecError("snapshot delta has no 'set' and 'del'")
                fresh = canon_all(sets)  # all read, or none
                for n in dict.fromkeys([*dels, *fresh]):
                    undo.append((n, canon.pop(n, None)))
                    if total is not None:
                        total -= digests.pop(n, 0)
                canon.update(fresh)
                if total is not None:
                    for n, c in fresh.items():
                        digests[n] = codec.key_digest(n, c[0], c[1])
                        total += digests[n]
                    actual = codec.combine(total)
            if each and actual != recorded:
                raise CodecError(f"snapshot of row {seq} does not match its recorded hash")
        except CodecError as exc:
            if not each:
                return FoldedChain(), str(exc)
            log.warning("L1 snapshot chain stops before row %s: %s", seq, exc)
            error = f"checkpoint row {seq}: {exc}"
            _undo(canon, undo)  # back to the last row that verified
            break
        fmt_row = fmt if base is None else codec.FORMAT_VERSION
        chain.rows.append(
            _Row(int(seq), str(recorded), int(l1_seq or 0), epoch, fmt_row, total, undo)
        )
        prev = seq
    if not each and check_newest and chain.rows:
        newest = chain.rows[-1]
        total = codec.digest_sum(canon)
        if codec.combine(total) != newest.recorded:
            return FoldedChain(), f"snapshot of row {newest.seq} does not match its recorded hash"
        chain.rows[-1] = dataclasses.replace(newest, total=total)
    return chain, error
