"""``DualRecoveryStrategy``: L1 as it is → Redis secondary → PostgreSQL, checked at each step."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from amber.codec import CodecError
from amber.errors import ConsistencyError
from amber.keys import check_id
from amber.memory.restore import L1CacheRestorer, Loaded
from amber.memory.snapshot import L1CacheSnapshotter, Snapshot, elapsed_ms
from amber.memory.ttl import L1TTLManager

log = logging.getLogger("amber.memory")

Replayer = Callable[[str, int], int]
"""(agent_id, after_seq) → entries replayed; the WAL mode's log replay."""


@dataclass(frozen=True)
class RecoveryReport:
    """Which path served an agent's L1, how long it took and what it holds now."""

    agent_id: str
    path: str
    """``l1_existing``, ``redis_secondary``, ``postgresql_checkpoint`` or ``empty``."""
    ms: float
    keys: int
    seq: int
    verified: bool
    replayed: int = 0
    reason: str = ""
    """Why the L1 fast path was not taken, when it was not."""


def l1_complete(snap: Snapshot, reference: Loaded | None) -> tuple[bool, str]:
    """Whether L1 as it is can be trusted, and why not when it cannot.

    Complete means: L1 exists, nothing its index lists has expired, and it is not
    older than the newest snapshot; at that snapshot's sequence it must also hash
    the same. A partly expired L1 (Flaw #25 D3) is never complete.
    """
    if not snap.indexed:
        return False, "no L1"
    if snap.missing:
        return False, f"{len(snap.missing)} key(s) expired: {', '.join(snap.missing[:5])}"
    if snap.seq == 0:
        return False, "L1 has keys but no sequence (written outside amber, or partly expired)"
    if reference is None:
        return True, ""
    if snap.seq < reference.seq:
        return False, f"L1 at sequence {snap.seq} is older than the snapshot ({reference.seq})"
    if snap.seq == reference.seq and snap.hash != reference.hash:
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
        self, agent_id: str, analysis_id: object, agent_type: str
    ) -> RecoveryReport:
        """Make the agent's L1 whole again and say how."""
        t0 = time.perf_counter()
        check_id(agent_id, "agent_id")
        snap = self.snapshotter.take(agent_id, full=True)
        reference: Loaded | None = None
        if snap.indexed:
            loaders: list[Callable[[], Loaded | None]] = [
                lambda: self.l1_restorer.load_secondary(agent_id),
                lambda: self.l1_restorer.load_postgres(analysis_id, agent_type),
            ]
            for load in loaders:
                try:
                    reference = load()
                except (ConsistencyError, CodecError) as exc:  # restore reports it below
                    log.warning("a snapshot of %s is unreadable: %s", agent_id, exc)
                if reference is not None:
                    break
        ok, reason = l1_complete(snap, reference)
        if ok:
            self.ttl_manager.restore_active_ttl_on_resume(agent_id)
            replayed = self._replay(agent_id, snap.seq)
            return RecoveryReport(
                agent_id, "l1_existing", elapsed_ms(t0), len(snap.memory), snap.seq, True, replayed
            )
        report = self.l1_restorer.restore_from_snapshot(agent_id, analysis_id, agent_type)
        if report is None:
            replayed = self._replay(agent_id, 0)
            keys = len(self.snapshotter.take(agent_id, full=True).memory) if replayed else 0
            return RecoveryReport(
                agent_id, "empty", elapsed_ms(t0), keys, 0, True, replayed, reason
            )
        replayed = self._replay(agent_id, report.seq)
        keys = len(self.snapshotter.take(agent_id, full=True).memory) if replayed else report.keys
        self.ttl_manager.restore_active_ttl_on_resume(agent_id)
        return RecoveryReport(
            agent_id,
            report.source,
            elapsed_ms(t0),
            keys,
            report.seq,
            report.verified,
            replayed,
            reason,
        )

    def _replay(self, agent_id: str, after: int) -> int:
        return self.replayer(agent_id, after) if self.replayer else 0
