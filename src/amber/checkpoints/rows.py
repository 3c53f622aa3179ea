"""``CheckpointRows``: how one checkpoint becomes one PostgreSQL row.

The row holds the record whole, or as a delta on the agent's newest whole row this
process wrote (``checkpoints/delta.py``), and is added by ``INSERT_CHECKPOINT``'s
compare-and-set, fenced by the analysis's lease, in that one statement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psycopg
from psycopg_pool import ConnectionPool

from amber import codec
from amber.checkpoints import delta
from amber.checkpoints.model import Checkpoint
from amber.engines.overlap import Overlapped
from amber.errors import CheckpointConflict, InvalidValue, fenced
from amber.memory.snapshot import Snapshot
from amber.schema import sql


@dataclass(frozen=True)
class L1Row:
    """An L1 snapshot as one checkpoint row stores it."""

    blob: bytes
    size: int
    """Its decompressed size."""
    base: int | None
    """For a delta, the checkpoint row it applies to; None for a whole snapshot."""
    chain: int
    """Deltas since the last whole snapshot, this one included."""


@dataclass(frozen=True)
class Encoded:
    """A checkpoint's record as its row stores it: the document, compressed, checksummed."""

    record: delta.Record
    packed: bytes
    sha256: str

    @classmethod
    def of(cls, record: delta.Record) -> Encoded:
        """``record`` compressed (when it is long enough to pay) and checksummed."""
        return cls(record, codec.pack_row(record.raw), codec.sha256_hex(record.raw))

    @property
    def raw(self) -> bytes:
        """The document's bytes, uncompressed."""
        return self.record.raw


_INSERT = Overlapped("amber_insert_checkpoint", sql.INSERT_CHECKPOINT)


class CheckpointRows:
    """Encodes checkpoints as rows (whole, or a delta on a base row) and adds them."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pg = pool
        self.bases = delta.Bases()

    def encode(self, cp: Checkpoint, known: Mapping[str, bytes] | None = None) -> Encoded:
        """``cp``'s row record: a delta on the agent's base when small enough, else whole;
        ``InvalidValue`` naming a field that is not JSON. Fields in ``known`` are taken
        as encoded already (``Checkpoint.fields``)."""
        base = self.bases.get(cp.agent_id, cp.analysis_id, cp.agent_type, cp.seq)
        return Encoded.of(delta.record(base, cp.fields(known)))

    def insert(
        self,
        cp: Checkpoint,
        enc: Encoded,
        snap: Snapshot,
        l1: L1Row | None,
        during: Callable[[bool], object] | None = None,
    ) -> str | None:
        """Add checkpoint ``cp.seq``: a compare-and-set insert, fenced by the analysis's
        lease; returns the analysis's status (None: no such row). A delta whose base row
        is gone (its analysis's rows were deleted under it) is written whole instead.

        ``during`` runs once, after the statement went out and while PostgreSQL executes
        and commits it (``engines/overlap.py``): work that overlaps the round trip
        instead of adding to it, and that need not decide whether the row is written.
        It is told whether the statement is in flight: where the connection cannot
        overlap (not in autocommit, not UTF-8) it runs first, told False, and should not
        wait on anything there."""
        row = self._insert(cp, _params(cp, enc, snap, l1), during)
        if row is None and enc.record.base is not None and not self._fenced_off(cp):
            self.bases.forget(cp.agent_id)  # a conflict refuses the whole record too
            enc = Encoded.of(delta.record(None, enc.record.fields))
            row = self._insert(cp, _params(cp, enc, snap, l1))
        if row is None:
            if self._fenced_off(cp):
                raise fenced(cp.analysis_id, str(cp.writer), f"write checkpoint {cp.seq}")
            raise CheckpointConflict(
                f"checkpoint {cp.seq} or a newer one already exists, or another run holds the"
                f" analysis's lease: this writer continued from checkpoint {cp.seq - 1} and"
                " would replace newer work",
                analysis_id=cp.analysis_id,
                agent_type=cp.agent_type,
                seq=cp.seq,
            )
        if enc.record.base is None:
            steps = len(cp.completed_subtasks)
            self.bases.keep(
                cp.agent_id,
                delta.Base(cp.analysis_id, cp.agent_type, cp.seq, cp.checkpoint_id,
                           enc.sha256, enc.record.fields, steps),
            )  # fmt: skip
        return None if row[1] is None else str(row[1])

    def _insert(
        self,
        cp: Checkpoint,
        params: dict[str, object],
        during: Callable[[bool], object] | None = None,
    ) -> tuple[object, ...] | None:
        try:
            with self.pg.connection() as conn:
                if during is None or not Overlapped.usable(conn):
                    if during is not None:
                        during(False)
                    return conn.execute(sql.INSERT_CHECKPOINT, params).fetchone()
                row = _INSERT.run(conn, params, lambda: during(True))
        except psycopg.DataError as exc:
            raise InvalidValue(
                f"checkpoint cannot be stored: {exc}".strip(),
                agent_id=cp.agent_id,
                analysis_id=cp.analysis_id,
            ) from None
        return None if row is None else (row[0], None if row[1] is None else row[1].decode())

    def _fenced_off(self, cp: Checkpoint) -> bool:
        """Why an insert was refused (read after it, to say so; the fence was the insert's
        own): the writer no longer holds the analysis, or it ended."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.LEASE_OF, (cp.analysis_id,)).fetchone()
        return row is not None and (row[0] != cp.writer or row[1] not in ("running", "paused"))


def _params(cp: Checkpoint, enc: Encoded, snap: Snapshot, l1: L1Row | None) -> dict[str, object]:
    """``INSERT_CHECKPOINT``'s parameters for ``cp`` stored as ``enc``, with ``snap``'s
    identity and, where stored, its image ``l1``."""
    base = enc.record.base
    return {
        "checkpoint_id": cp.checkpoint_id,
        "seq": cp.seq,
        "writer": cp.writer,
        "stock_ticker": cp.stock_ticker,
        "agent_type": cp.agent_type,
        "agent_id": cp.agent_id,
        "analysis_id": cp.analysis_id,
        "checkpoint_time": cp.checkpoint_time,
        "progress_pct": cp.progress_pct,
        "current_subtask": cp.current_subtask,
        "completed_subtasks": sql.text_array(enc.record.steps(cp.completed_subtasks)),
        "pending_subtasks": sql.text_array(cp.pending_subtasks),
        "failure_reason": cp.failure_reason,
        "retry_count": cp.retry_count,
        "agent_version": cp.agent_version,
        "state": enc.packed,
        "state_sha256": enc.sha256,
        "state_size": len(enc.raw),
        "state_base": base.seq if base else None,
        "base_id": base.checkpoint_id if base else None,
        # the memory's identity goes in every row, its image only where stored: a
        # rollback finds the newest checkpoint taken with a memory it could rebuild
        "l1_snapshot": l1.blob if l1 else None,
        "l1_snapshot_hash": snap.hash,
        "l1_snapshot_seq": snap.seq,
        "l1_snapshot_size": l1.size if l1 else None,
        "l1_snapshot_epoch": snap.epoch,
        "l1_snapshot_keys": len(snap.memory),
        "l1_snapshot_base": l1.base if l1 else None,
    }
