"""``KnownWrites``: what one memory object wrote since its agent's last save, kept in the
process that wrote it, so the save need not read those values back from Redis.

Every write script bumps the agent's sequence by one and returns it with the memory's
epoch. Writes whose sequences run on, without a gap, from the sequence of the snapshot
the last save stored, all under that snapshot's epoch, are provably the only writes
since: any other writer (another object, process or restore) would have taken a
sequence in between or started another epoch. Their values are then the memory's
changes, exactly as Redis holds them. Anything less certain (a write whose result
depends on what Redis held, a failed call, an own TTL) leaves the log unsound, and the
save reads the changes from Redis as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from amber.codec import Entry
from amber.memory.snapshot_model import Snapshot, merge_changes

MAX_BYTES = 4 * 1024 * 1024
"""Bytes of values a memory object keeps for its next save; past them it keeps none (and
that save reads Redis), so an object written to for long without a save never holds a
second copy of a big memory."""


@dataclass
class KnownWrites:
    """String values set (``None``: deleted) by one memory object since its last save."""

    enabled: bool = True
    """False where sequences are not the scripts' own (the ``wal`` mode's log hands them out)."""
    values: dict[str, bytes | None] = field(default_factory=dict)
    first: int = 0
    """The sequence of the first write noted (0: none yet)."""
    last: int = 0
    count: int = 0
    epoch: str | None = None
    sound: bool = True
    nbytes: int = 0
    seen: tuple[str, int] | None = None
    """(epoch, latest sequence) Redis gave this object's writes, whatever else the log
    lets go, and handed on to the next log (:meth:`handed_on`): for :meth:`lost_since`."""
    backwards: str = ""
    """Why a write's sequence says Redis lost earlier ones ('' if none has); handed on
    until the memory is another incarnation."""

    def note(self, seq: Any, epoch: Any, sets: Iterable[tuple[str, bytes | None]] | None) -> None:
        """One write Redis applied at ``seq`` under ``epoch``; ``sets`` its resulting
        values by name (None: a write whose result is not known here)."""
        if not self.enabled:
            return
        known = isinstance(seq, int) and isinstance(epoch, bytes)
        text = epoch.decode() if known else ""
        if known:
            self._saw(seq, text)
        if not self.sound:
            return
        if sets is None or not known:
            self.spoil()
            return
        if self.count == 0:
            self.first, self.epoch = seq, text
        elif text != self.epoch:
            self.spoil()
            return
        self.last = seq
        self.count += 1
        for name, value in sets:
            self.values[name] = value
            self.nbytes += len(name) + (len(value) if value is not None else 0)
        if self.nbytes > MAX_BYTES:
            self.spoil()

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Around a write's Redis call: a call that fails may or may not have applied."""
        try:
            yield
        except BaseException:
            self.spoil()
            raise

    def spoil(self) -> None:
        """Nothing noted can be trusted (a call failed, or too much to keep): the next
        save reads Redis, and what was kept is let go."""
        self.sound = False
        self.values.clear()

    def saw(self, seq: int, epoch: str) -> None:
        """A write of this object's that Redis applied at ``seq`` under ``epoch`` outside
        this log (a deferred batch, sent with a save): only its sequence is kept."""
        if self.enabled:
            self._saw(seq, epoch)

    def _saw(self, seq: int, epoch: str) -> None:
        if self.seen is not None and self.seen[0] == epoch:
            if seq <= self.seen[1] and not self.backwards:
                self.backwards = (
                    f"a write was given sequence {seq}, where an earlier write of this"
                    f" memory object was given {self.seen[1]} (a failover to a replica that"
                    " had not received the writes?)"
                )
            seq = max(seq, self.seen[1])
        elif self.seen is not None:  # another incarnation: nothing to compare with
            self.backwards = ""
        self.seen = (epoch, seq)

    def lost_since(self) -> str:
        """Why Redis no longer holds writes it acknowledged to this memory object, by the
        sequences it gave them: a write given a sequence no later than an earlier one's
        under the same epoch. A replica promoted behind its primary (a failover) gives out
        again the sequences of the writes it never received, so the sequence alone would
        name two memories. '' when nothing says so."""
        return self.backwards

    def handed_on(self) -> KnownWrites:
        """A fresh log for the writes to come, keeping what Redis told this object."""
        return KnownWrites(enabled=self.enabled, seen=self.seen, backwards=self.backwards)

    def proves(self, base: Snapshot) -> bool:
        """Whether these writes on ``base`` give the memory as Redis holds it now."""
        return (
            self.enabled
            and self.sound
            and self.count > 0
            and not base.owned  # an own TTL's expiry is a change no write records
            and self.epoch == base.epoch
            and self.first == base.seq + 1
            and self.last == base.seq + self.count
        )

    def apply(self, base: Snapshot, consume: bool) -> Snapshot:
        """``base`` with these writes applied (call only when :meth:`proves`); ``consume``
        as in ``read_changes``."""
        got = {n: Entry("string", v) for n, v in self.values.items() if v is not None}
        return merge_changes(base, sorted(self.values), got, self.last, base.epoch, (), consume)


def batch_sets(ops: list[list[Any]]) -> list[tuple[str, bytes | None]] | None:
    """A batch's resulting values by name, when it only sets strings and deletes
    (``memory/batch.py``'s ops: command, name, type, values)."""
    out: list[tuple[str, bytes | None]] = []
    for command, name, _, values in ops:
        if command == "SET":
            out.append((name, values[0]))
        elif command == "DEL":
            out.append((name, None))
        else:
            return None
    return out
