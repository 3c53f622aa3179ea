"""``DualRecoveryStrategy``: L1 as it is → Redis secondary → PostgreSQL, checked at each step."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from amber import codec, observe
from amber.errors import AmberError, Fenced, StoreUnavailable
from amber.keys import check_id
from amber.memory import scripts
from amber.memory.apply import Held
from amber.memory.chain import Loaded
from amber.memory.restore import L1CacheRestorer, newer_than
from amber.memory.snapshot import L1CacheSnapshotter, Snapshot, elapsed_ms
from amber.memory.ttl import L1TTLManager

log = logging.getLogger("amber.memory")

EMPTY_HASH = codec.combine(0)
"""The hash of an empty working memory."""

Replayer = Callable[[str, int, str | None], tuple[int, str | None]]
"""(agent_id, after_seq, epoch) → (entries replayed, epoch after): the WAL mode's log
replay, guarded by the incarnation it replays onto, so a memory lost meanwhile is
``MemoryLost``, never a memory rebuilt from part of the log."""


@dataclass(frozen=True)
class RecoveryReport:
    """Which path served an agent's L1, how long it took and what it holds now."""

    agent_id: str
    path: str
    """``l1_existing``, ``redis_secondary``, ``postgresql_checkpoint``, ``empty`` (an agent
    with no checkpoint), ``checkpoint_empty`` (its checkpoint's memory was empty, and no
    snapshot of it is stored), or ``rolled_back`` (the memory of the newest checkpoint
    could not be rebuilt: the agent continues from an older checkpoint whose memory could)."""
    ms: float
    keys: int
    seq: int
    verified: bool
    """True only when the memory was compared with a recorded snapshot hash and matched
    (a restore, or L1 found at a snapshot's own sequence); False when nothing could be
    compared (an L1 newer than every snapshot, no memory at all)."""
    replayed: int = 0
    reason: str = ""
    """Why the L1 fast path was not taken, when it was not."""
    epoch: str | None = None
    """The incarnation of the memory now in Redis (None: no memory)."""
    hash: str | None = None
    """The hash of the memory restored (None: L1 kept as it was)."""
    current: bool = True
    """Whether the memory is that of the checkpoint the agent continues from (or newer
    writes of the same memory); False: only an older memory could be rebuilt, and the
    agent must roll back to the checkpoint that holds it (see ``LeadCoordinator``)."""
    rolled_back_from: int | None = None
    """With ``rolled_back``: the newest checkpoint, whose memory was lost."""
    rolled_back_to: int | None = None
    """With ``rolled_back``: the checkpoint the agent continues from (0: its start)."""
    rerun: tuple[str, ...] = ()
    """With ``rolled_back``: the steps that run again."""


@dataclass(frozen=True)
class MemoryMark:
    """Which memory a checkpoint was taken with: its L1 sequence, hash and incarnation."""

    seq: int
    hash: str
    epoch: str | None = None


def _born_from_snapshot_at_least(epoch: str | None, seq: int) -> bool:
    """Whether an epoch was started by restoring a snapshot at sequence ``seq`` or later."""
    if not epoch or not epoch.startswith("r"):
        return False
    born, _, _ = epoch[1:].partition(":")
    return born.isdigit() and int(born) >= seq


def _same_hash(snap: Snapshot, reference: Loaded | MemoryMark) -> bool:
    """Whether ``snap`` hashes to ``reference``'s hash, in the format it was taken in (a
    snapshot an older amber wrote may be in format 1; a mark's format is not known, so
    either will do)."""
    if isinstance(reference, Loaded):
        return snap.hash_in(reference.fmt) == reference.hash
    # a mark read without its snapshot does not say its format: an older amber's counts too
    return any(snap.hash_in(fmt) == reference.hash for fmt in codec.FORMATS[::-1])


def l1_complete(snap: Snapshot, reference: Loaded | MemoryMark | None) -> tuple[bool, str]:
    """Whether L1 as it is can be trusted, and why not when it cannot.

    Complete means: L1 exists, nothing its index lists has expired, it is not older
    than the newest snapshot, and it descends from it: the same incarnation (epoch),
    or one restored from that snapshot or a newer one. A memory that was re-created
    after the snapshot (lost, then written again) is not complete, however high its
    sequence; at the snapshot's own sequence it must also hash the same. A partly
    expired L1 (Flaw #25 D3) is never complete, nor is one a restore wrote and did not
    confirm (its snapshot hashed while Redis wrote it: ``memory/apply.py``).
    """
    if not snap.indexed:
        return False, "no L1"
    if snap.unconfirmed:
        return False, "L1 was written by a restore that was never confirmed"
    if snap.missing:
        return False, f"{len(snap.missing)} key(s) expired: {', '.join(snap.missing[:5])}"
    if snap.seq == 0:
        return False, "L1 has keys but no sequence (written outside amber, or partly expired)"
    if reference is None:
        return True, ""
    if snap.seq < reference.seq:
        return False, f"L1 at sequence {snap.seq} is older than the snapshot ({reference.seq})"
    if (
        reference.epoch is not None
        and snap.epoch != reference.epoch
        and not _born_from_snapshot_at_least(snap.epoch, reference.seq)
    ):
        return False, (
            f"L1 (epoch {snap.epoch}) was re-created after the snapshot at sequence"
            f" {reference.seq} (epoch {reference.epoch}): what it held then was lost"
        )
    if snap.seq == reference.seq and not _same_hash(snap, reference):
        return False, "L1 differs from the snapshot taken at the same sequence"
    return True, ""


class DualRecoveryStrategy:
    """Recovers an agent's L1 by the fastest complete and correct tier."""

    def __init__(
        self,
        snapshotter: L1CacheSnapshotter,
        restorer: L1CacheRestorer,
        ttl_manager: L1TTLManager,
        replayer: Replayer | None = None,
    ) -> None:
        self.snapshotter = snapshotter
        self.l1_restorer = restorer
        self.ttl_manager = ttl_manager
        self.replayer = replayer

    def recover_agent_state(
        self,
        agent_id: str,
        analysis_id: object,
        agent_type: str,
        fresh: bool = False,
        want: MemoryMark | None = None,
        token: int | None = None,
    ) -> RecoveryReport:
        """Make the agent's L1 whole again and say how.

        A tier that cannot be read (corrupt, a key of the wrong type) is skipped with
        its reason logged; ``ConsistencyError`` if every snapshot there is fails. With
        ``fresh`` (the agent has no checkpoint, so no snapshot of it exists anywhere)
        only L1 is read: kept if complete, else the memory starts empty.

        ``want`` is the memory of the checkpoint the agent continues from: L1 as it is
        must descend from it, and a restore looks for it first. When no tier holds it,
        the newest memory that can be rebuilt is restored and the report says
        ``current=False`` (nothing is emitted then: the caller rolls back and says so).

        ``token`` (the recovering run's fencing token) takes the memory over first: every
        run with a lower token is fenced off from it, and a recovery by a run that was
        itself fenced off is ``Fenced``, having changed nothing.
        """
        try:
            if token is not None:
                self.l1_restorer.take_over(agent_id, token)
            report = self._recover(agent_id, analysis_id, agent_type, fresh, want, token)
        except AmberError as exc:
            if not isinstance(exc, StoreUnavailable | Fenced):
                observe.emit(observe.RECOVERY, path="failed")
            raise
        if report.current:
            observe.emit(observe.RECOVERY, path=observe.recovery_path(report.path))
        return report

    def _recover(
        self,
        agent_id: str,
        analysis_id: object,
        agent_type: str,
        fresh: bool,
        want: MemoryMark | None,
        token: int | None = None,
    ) -> RecoveryReport:
        t0 = time.perf_counter()
        check_id(agent_id, "agent_id")
        try:
            # a fresh agent's memory is most often empty: then one round trip reads it
            snap = self.snapshotter.take(agent_id, full=True, guess_empty=fresh)
        except StoreUnavailable:
            raise
        except AmberError as exc:  # garbage in the index or sequence: L1 is not trusted
            log.warning("L1 of %s is unreadable: %s", agent_id, exc)
            return self._restore(
                agent_id, analysis_id, agent_type, t0, f"L1 unreadable: {exc}", want, token
            )
        reference: Loaded | MemoryMark | None = want
        if snap.indexed and not fresh and want is None:
            reference = self._newest(agent_id, analysis_id, agent_type)
            if isinstance(reference, MemoryMark):  # a restore looks for PostgreSQL's first
                want = reference
        ok, reason = l1_complete(snap, reference)
        if ok:
            self.ttl_manager.restore_active_ttl_on_resume(agent_id)
            replayed, epoch = self._replay(agent_id, snap.seq, snap.epoch)
            verified = (
                reference is not None
                and snap.seq == reference.seq
                and _same_hash(snap, reference)
                and not replayed
            )
            return RecoveryReport(
                agent_id,
                "l1_existing",
                elapsed_ms(t0),
                len(snap.memory),
                snap.seq,
                verified,
                replayed,
                epoch=epoch,
            )
        if fresh:  # a memory a restore left unconfirmed, read just now, is no one's: cleared
            report = self._empty(agent_id, t0, reason, wipe=snap.unconfirmed, token=token)
            if self.replayer is None and not snap.memory and report.epoch == snap.epoch:
                # read just now and empty: the first checkpoint's base, so it reads nothing
                self.snapshotter.remember(snap)
            return report
        # what L1's index named when read just now: the keys the restore replaces (it is
        # refused, and reads the index again, if the memory was written since)
        held = Held((*snap.memory, *snap.missing), snap.seq, snap.epoch)
        return self._restore(agent_id, analysis_id, agent_type, t0, reason, want, token, held)

    def _newest(
        self, agent_id: str, analysis_id: object, agent_type: str
    ) -> Loaded | MemoryMark | None:
        """The newest memory stored anywhere, for L1 to be compared with: the Redis
        secondary, unless PostgreSQL's newest checkpoint holds a later one (or another at
        the same sequence), whose mark (read without the memory) is then the reference.
        The secondary alone is not trusted to be newest: a failover can take it back with
        the memory it copied."""
        secondary = None
        try:
            secondary = self.l1_restorer.load_secondary(agent_id)
        except StoreUnavailable:
            raise
        except AmberError as exc:  # a restore reports it
            log.warning("the secondary snapshot of %s is unreadable: %s", agent_id, exc)
        try:
            mark = self.l1_restorer.newest_mark(analysis_id, agent_type)
        except StoreUnavailable as exc:  # the secondary, as when PostgreSQL was not asked
            log.warning("PostgreSQL's newest memory of %s was not read: %s", agent_id, exc)
            return secondary
        if mark is None:
            return secondary
        if secondary is None or newer_than(mark[0], mark[1], secondary):
            return MemoryMark(*mark)
        return secondary

    def _restore(
        self,
        agent_id: str,
        analysis_id: object,
        agent_type: str,
        t0: float,
        reason: str,
        want: MemoryMark | None = None,
        token: int | None = None,
        held: Held | None = None,
    ) -> RecoveryReport:
        report = self.l1_restorer.restore_from_snapshot(
            agent_id, analysis_id, agent_type, want.hash if want else None, token, held
        )
        if report is None:
            wipe = want is not None or scripts.unconfirmed(held.epoch if held else None)
            empty = self._empty(agent_id, t0, reason, wipe=wipe, token=token)
            if want is None:
                return empty
            if want.hash == EMPTY_HASH:  # the checkpoint's memory was empty: rebuilt
                return dataclasses.replace(empty, path="checkpoint_empty", verified=True)
            return dataclasses.replace(empty, current=False)
        if want is not None and report.hash != want.hash:
            # an older memory than the checkpoint's: no log replay onto it (the log
            # continues the lost memory), and the caller rolls the agent back to it
            return RecoveryReport(
                agent_id,
                report.source,
                elapsed_ms(t0),
                report.keys,
                report.seq,
                report.verified,
                0,
                f"{reason}; the memory of the newest checkpoint could not be rebuilt",
                report.epoch,
                report.hash,
                current=False,
            )
        replayed, epoch = self._replay(agent_id, report.seq, report.epoch)
        now = self.snapshotter.take(agent_id, full=True) if replayed else None
        return RecoveryReport(
            agent_id,
            report.source,
            elapsed_ms(t0),
            len(now.memory) if now else report.keys,
            report.seq,
            report.verified,
            replayed,
            reason,
            epoch,
            report.hash,
        )

    def _empty(
        self, agent_id: str, t0: float, reason: str, wipe: bool = False, token: int | None = None
    ) -> RecoveryReport:
        """No snapshot anywhere: the memory starts from nothing (or from its log).

        ``wipe``: whatever is left in L1 (keys of a memory found incomplete) is cleared,
        so the empty memory reported is the one in Redis."""
        epoch = None
        if self.replayer is not None or wipe:  # the log holds it all: start from nothing
            epoch = self.l1_restorer.wipe(agent_id, token)
        replayed, epoch = self._replay(agent_id, 0, epoch)
        now = self.snapshotter.take(agent_id, full=True) if replayed else None
        return RecoveryReport(
            agent_id,
            "empty",
            elapsed_ms(t0),
            len(now.memory) if now else 0,
            0,
            False,
            replayed,
            reason,
            epoch,
            None if now else EMPTY_HASH,
        )

    def _replay(self, agent_id: str, after: int, epoch: str | None) -> tuple[int, str | None]:
        return self.replayer(agent_id, after, epoch) if self.replayer else (0, epoch)
