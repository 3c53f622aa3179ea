"""``AgentCheckpointer``: save at every subtask boundary, restore what PostgreSQL says is newest.

A save writes PostgreSQL first, as a compare-and-set on the agent's checkpoint
sequence (``schema/sql.py``): a writer that continued from an older checkpoint
than the newest gets ``CheckpointConflict`` and writes nothing. While PostgreSQL
executes and commits that insert, one Lua script is sent that writes the Redis
copies (the checkpoint backup and the L1 snapshot secondary), each only over an
older copy (sent before the insert instead when the row does not hold the memory,
as in ``hybrid`` mode: Redis is then the only place it is kept). A crash before it
reaches Redis leaves Redis one checkpoint behind, which restore notices: PostgreSQL
is the authority, and the backup is used only when it names the sequence of the
newest committed row. Where the durability mode (or a pause) asks for it, the L1
snapshot goes into the same PostgreSQL row.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import redis
from psycopg_pool import ConnectionPool

from amber import codec, observe
from amber.checkpoints.growing import GrowingFields
from amber.checkpoints.model import Checkpoint, now, seal
from amber.checkpoints.reads import CheckpointReads
from amber.checkpoints.rows import CheckpointRows, L1Row
from amber.checkpoints.versions import CheckpointMigrations, registry
from amber.config import Durability, Settings
from amber.engines.later import Pending
from amber.errors import (
    AmberError,
    MemoryLost,
    StoreUnavailable,
)
from amber.keys import Keys, check_id, check_uuid
from amber.memory import scripts
from amber.memory.apply import disown
from amber.memory.batch import Staged
from amber.memory.journal import L1Journal
from amber.memory.known import KnownWrites, batch_sets
from amber.memory.reading import redis_errors
from amber.memory.recovery import MemoryMark
from amber.memory.restore import PG_SNAPSHOTS_TRIED
from amber.memory.snapshot import (
    MAX_CHAIN,
    L1CacheSnapshotter,
    Sealed,
    Snapshot,
    SnapshotMeta,
    Stored,
)
from amber.memory.working import AgentMemory
from amber.schema import sql

log = logging.getLogger("amber.checkpoints")

QUIET_MAX_BYTES = 8 * 1024
"""Largest checkpoint (encoded) a hybrid save of an empty, unchanged working memory
leaves out of Redis: restore reads a row this small from PostgreSQL as fast as from
Redis (docs/cluster.md: 0.19 ms against 0.25 ms), and asks PostgreSQL for the newest
sequence either way."""


class Checkpointable(Protocol):
    """What an agent exposes to be checkpointed (DD-011's save/restore API)."""

    analysis_id: str
    stock_ticker: str
    agent_id: str
    completed_subtasks: list[str]
    pending_subtasks: list[str]
    retry_count: int
    config: dict[str, Any]
    l1_cache: AgentMemory
    checkpoint_seq: int
    """The sequence of the checkpoint this agent continues from (0: none)."""
    checkpoint_l1_keys: int
    """Keys in that checkpoint's L1 snapshot."""
    checkpoint_l1: MemoryMark | None
    """Which memory that checkpoint was taken with (None: none, or not recorded)."""
    runner: str
    step_functions: dict[str, str]
    """The function each completed step ran (``module:qualname``), by step key."""
    run_status: str | None
    """The analysis's status as the last checkpoint's commit saw it (set by the save)."""
    encoded: GrowingFields
    """The encoded bytes of its record's growing fields, as its last save made them."""

    @property
    def agent_type(self) -> str: ...
    @property
    def version(self) -> str: ...
    def calculate_progress(self) -> float: ...
    def next_subtask(self) -> str | None: ...
    def get_interim_results(self) -> dict[str, Any]: ...


def _unsent() -> Any:
    raise redis.ConnectionError("Redis could not be reached")


class AgentCheckpointer(CheckpointReads):
    """Saves and restores agent checkpoints (DD-011) with their L1 snapshots (DD-016);
    the restores and read-only queries are ``CheckpointReads``'."""

    def __init__(
        self,
        client: redis.Redis,
        pool: ConnectionPool,
        keys: Keys,
        settings: Settings,
        snapshotter: L1CacheSnapshotter,
        migrations: CheckpointMigrations | None = None,
        journal: L1Journal | None = None,
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.settings = settings
        self.snapshotter = snapshotter
        self.migrations = migrations or registry
        self.journal = journal
        self.backup_ttl_ms = settings.checkpoint_backup_ttl * 1000
        self._cache_sha = client.register_script(scripts.CACHE).sha
        self.rows = CheckpointRows(pool)
        self.mode = settings.durability.value
        """The durability mode, as metrics label checkpoint latencies."""

    @observe.traced("amber.checkpoint.save")
    def save_checkpoint(
        self,
        agent: Checkpointable,
        subtask_completed: str | None,
        *,
        failure_reason: str | None = None,
        error_details: dict[str, Any] | None = None,
        dual_write: bool | None = None,
    ) -> Checkpoint:
        """Checkpoint ``agent`` after ``subtask_completed`` (None: a failure or pause point).

        The checkpoint is ``agent.checkpoint_seq + 1``; ``CheckpointConflict`` if a newer
        one exists (nothing is written). ``MemoryLost`` if the agent's working memory
        was lost since it was recovered: an empty or re-created memory never replaces
        a stored one. ``dual_write`` (default: per durability mode) puts the L1 snapshot
        in PostgreSQL too. Acknowledged when PostgreSQL has committed.
        """
        t0 = time.perf_counter()
        mem = agent.l1_cache
        # the snapshot stays this store's own (never handed out), so the next save may
        # take over its maps: see L1CacheSnapshotter.advance
        stored = self.snapshotter.stored(agent.agent_id)
        sendable = mem.redis is self.redis and Pending.can_hold(self.redis)
        staged = Staged.take(mem, stored.snap if stored is not None else None, sendable)
        written = set(mem.written)
        snap = self._unchanged(agent, written, stored)  # None when anything is staged
        unchanged = snap is not None
        private = snap is None or (stored is not None and stored.private)
        if snap is None:
            snap, staged = self._advance(agent, written, staged)
        else:
            mem.take_known()  # nothing written since the stored snapshot: a fresh log
        try:
            self._check_memory(agent, snap)
            cp = self._record(agent, snap, subtask_completed, failure_reason, error_details)
            enc = self.rows.encode(cp, agent.encoded.known(agent))
            agent.encoded.learn(agent, enc.record.fields)
            raw = enc.raw
            dual = (
                self.settings.durability != Durability.HYBRID if dual_write is None else dual_write
            )
            l1 = self._l1_row(snap, stored, agent.checkpoint_seq) if dual else None
            small = enc.record.whole_size <= QUIET_MAX_BYTES
            quiet = not dual and unchanged and not snap.memory and small
        except BaseException:
            if staged is not None:  # nothing sent: still this object's to apply
                mem.restage(staged.ops)
            raise
        copies: tuple[SnapshotMeta, Sealed] | None = None
        # a Redis connection is taken before the statement goes out, so an unreachable
        # Redis refuses a save with deferred writes before anything is committed (below)
        pending = None if quiet else Pending.hold(self.redis)
        # a row without the memory leaves Redis as the only place this checkpoint's memory
        # is kept: its copies then go out before the insert, so no commit lands without them
        first = l1 is None and not quiet

        def send(in_flight: bool = False) -> bool:
            # the Redis copies (and deferred writes) are built and sent while PostgreSQL
            # executes and commits the insert (``in_flight``), and their replies read
            # then too, Redis answering first, kept for after the commit: the two round
            # trips and this work overlap. Restore trusts a copy only at PostgreSQL's newest
            # sequence, so a copy of a checkpoint that then fails to commit is never used.
            # Once the insert went out it may have committed, so nothing here may fail the
            # save: whatever goes wrong counts as copies not sent (written again after
            # the commit, or, for deferred writes, MemoryLost). Sent ``first``, an error
            # fails the save with nothing committed.
            nonlocal copies
            try:
                backup = (self.keys.checkpoint(cp.agent_id), seal(cp, raw, enc.packed),
                          cp.seq, self.backup_ttl_ms)  # fmt: skip
                copies = (self.snapshotter.meta(snap, cp.checkpoint_id), backup)
                commands = self._cache_commands(snap, *copies, staged=staged, inline=first)
                sent = pending is not None and pending.send_now(commands)
                if sent and in_flight and pending is not None:
                    pending.replies()
                return sent
            except Exception:
                if first:
                    raise
                log.exception("the Redis copies of checkpoint %s were not sent", cp.seq)
                if pending is not None:
                    pending.drop()
                return False

        try:
            reachable = send() if first else pending is not None
            if staged is not None and not reachable:  # restaged below: nothing was sent
                raise StoreUnavailable(
                    "Redis could not be reached to write the deferred memory writes",
                    agent_id=agent.agent_id,
                )
            during = None if quiet or first else send
            agent.run_status = self.rows.insert(cp, enc, snap, l1, during)
        except BaseException:
            if pending is not None and pending.count:
                got = pending.replies()
                if staged is not None and not isinstance(staged.again(got[0]), list):
                    mem.restage(staged.ops)  # not applied: sent again later
            else:
                if pending is not None:
                    pending.release()
                if staged is not None:  # nothing sent: still this object's to apply
                    mem.restage(staged.ops)
            raise
        agent.checkpoint_seq = cp.seq
        agent.checkpoint_l1_keys = len(snap.memory)
        agent.checkpoint_l1 = MemoryMark(snap.seq, snap.hash, snap.epoch)
        mem.written -= written
        replies = pending.replies() if pending is not None and pending.count else None
        if staged is not None:
            if replies is None:  # their send failed once the insert had gone out
                replies = [redis.ConnectionError("the deferred writes could not be sent")] * 2
            replies[0] = staged.again(replies[0])
            if not staged.applied(replies[0]):
                self._not_applied(cp, mem, snap, copies, staged, replies, l1 is not None)
                observe.emit(observe.CHECKPOINT_SAVE, time.perf_counter() - t0, mode=self.mode)
                return cp
            mem.known.saw(staged.seq, staged.epoch)  # the sequence Redis gave them
        if quiet or copies is not None:
            self.snapshotter.remember(
                snap, cp.seq if l1 else None, l1.chain if l1 else 0, private=private
            )
        else:  # the copies could not even be built (see send): nothing known of Redis's
            self.snapshotter.forget(cp.agent_id)
        if dual and self.journal is not None:
            self._compact_log(cp)
        self._cache(cp, snap, copies, (lambda: replies[-1]) if replies else _unsent)
        observe.emit(observe.CHECKPOINT_SAVE, time.perf_counter() - t0, mode=self.mode)
        return cp

    def _advance(
        self, agent: Checkpointable, written: set[str], staged: Staged | None
    ) -> tuple[Snapshot, Staged | None]:
        """The agent's memory as this save stores it, and the staged writes still to send
        with it. With staged writes, their values on the stored snapshot; when the
        snapshot had to be read from Redis after all (the stored one was let go between,
        or too much was written to keep), Redis does not hold them yet: they are applied
        now, the ordinary way, and the memory read whole."""
        mem = agent.l1_cache
        known = mem.take_known()
        try:
            if staged is not None:  # Redis applies them at the next sequence: Staged.take
                known.note(staged.seq, staged.epoch.encode(), batch_sets(staged.ops))
            snap = self.snapshotter.advance(agent.agent_id, hint=written, known=known)
            self._refuse_lost_writes(agent, known, snap)
        except BaseException:
            if staged is not None:  # nothing sent: still the memory object's to apply
                mem.restage(staged.ops)
            raise
        if staged is None or staged.held_by(snap):
            return snap, staged
        mem.restage(staged.ops)
        mem.flush()
        mem.known.spoil()
        return self.snapshotter.advance(agent.agent_id, hint=written), None

    def _record(
        self,
        agent: Checkpointable,
        snap: Snapshot,
        subtask_completed: str | None,
        failure_reason: str | None,
        error_details: dict[str, Any] | None,
    ) -> Checkpoint:
        """The checkpoint after the agent's newest one, with ``snap`` as its memory."""
        return Checkpoint(
            checkpoint_id=str(uuid.uuid4()),
            analysis_id=check_uuid(agent.analysis_id),
            stock_ticker=agent.stock_ticker,
            agent_type=check_id(agent.agent_type, "agent_type"),
            agent_id=agent.agent_id,
            checkpoint_time=now(),
            agent_version=agent.version,
            progress_pct=round(agent.calculate_progress(), 2),
            current_subtask=agent.next_subtask(),
            completed_subtasks=list(agent.completed_subtasks),
            pending_subtasks=list(agent.pending_subtasks),
            interim_results=agent.get_interim_results(),
            step_functions=dict(agent.step_functions),
            agent_config=dict(agent.config),
            retry_count=agent.retry_count,
            failure_reason=failure_reason,
            error_details=error_details,
            l1_snapshot_hash=snap.hash,
            l1_snapshot_seq=snap.seq,
            l1_snapshot_epoch=snap.epoch,
            l1_snapshot_keys=len(snap.memory),
            seq=agent.checkpoint_seq + 1,
            writer=agent.runner,
            extra={"subtask_completed": subtask_completed},
        )

    def _not_applied(
        self,
        cp: Checkpoint,
        mem: AgentMemory,
        snap: Snapshot,
        copies: tuple[SnapshotMeta, Sealed] | None,
        staged: Staged,
        replies: list[Any],
        in_row: bool,
    ) -> None:
        """After a commit whose deferred writes Redis did not take as planned. Applied
        later in the same epoch (another object's write came first): nothing is lost, and
        the next save reads what Redis holds. Otherwise working memory is not the
        checkpoint's: ``MemoryLost`` (or ``Fenced``) says so, and the memory is recovered
        from that checkpoint: its row when it holds the memory (``in_row``), else the
        Redis copy written here (``hybrid``; without it, the recovery rolls back)."""
        self.snapshotter.forget(cp.agent_id)
        mem.known.spoil()
        with contextlib.suppress(StoreUnavailable):  # copies: a cache; the error is below
            self._cache(cp, snap, copies, lambda: replies[1])
        error = staged.error(
            replies[0], cp.seq, cp.checkpoint_id, cp.analysis_id, cp.writer, in_row
        )
        if error is not None:
            raise error

    def _unchanged(
        self, agent: Checkpointable, written: set[str], stored: Stored | None
    ) -> Snapshot | None:
        """The stored snapshot as this save's, with no read, when the memory provably has
        not changed: this process stored it, of the incarnation the agent is guarded on,
        the agent wrote nothing since, and no key has a TTL of its own (whose expiry
        would be a change). Another writer is excluded by the lease; a memory Redis lost
        meanwhile is found by the agent's next guarded read or write."""
        mem = agent.l1_cache
        if written or not mem.guarded:
            return None
        if stored is None or stored.snap.owned or stored.snap.epoch != mem.epoch:
            return None
        return stored.snap.unchanged()

    @staticmethod
    def _l1_row(snap: Snapshot, stored: Stored | None, base_row: int) -> L1Row:
        """The snapshot as this checkpoint's row stores it: a delta on the row before when
        that row holds the snapshot it was read against, else whole."""
        if (
            stored is not None
            and stored.pg_row == base_row
            and snap.base_seq == stored.snap.seq
            and stored.chain < MAX_CHAIN
        ):
            raw = snap.delta_raw(base_row)
            return L1Row(codec.pack_row(raw), len(raw), base_row, stored.chain + 1)
        return L1Row(snap.pack(), len(snap.raw), None, 0)

    def _refuse_lost_writes(
        self, agent: Checkpointable, known: KnownWrites, snap: Snapshot
    ) -> None:
        """``MemoryLost`` when Redis gave a write of the agent's memory object a sequence
        no later than an earlier write's, and the memory is still that incarnation: it
        lost writes it had acknowledged. The memory is first marked unconfirmed, so that
        no recovery keeps it as it is (if that fails, the object's log still says so, and
        the next save refuses too)."""
        lost = known.lost_since()
        if not lost or known.seen is None or snap.epoch != known.seen[0]:
            return
        self.snapshotter.forget(agent.agent_id)
        mem = agent.l1_cache
        try:
            disown(mem.redis, mem.keys, agent.agent_id, known.seen[0], mem.token)
        except AmberError as exc:
            lost += f"; it could not be marked lost: {exc}"
        raise MemoryLost(
            f"working memory lost writes Redis had acknowledged ({lost}); recover it first",
            agent_id=agent.agent_id,
            analysis_id=agent.analysis_id,
        )

    @staticmethod
    def _check_memory(agent: Checkpointable, snap: Snapshot) -> None:
        """Refuse a snapshot of a memory that lost data since the agent recovered it, or
        that a restore wrote and did not confirm (guarded or not): ``MemoryLost``."""
        mem = agent.l1_cache
        snap.refuse_unconfirmed(analysis_id=agent.analysis_id)
        lost = ""
        if mem.guarded and snap.epoch != mem.epoch:
            lost = f"its incarnation changed from {mem.epoch} to {snap.epoch}"
        elif snap.missing:
            lost = f"{len(snap.missing)} key(s) expired: {', '.join(snap.missing[:5])}"
        elif agent.checkpoint_l1_keys > 0 and not snap.indexed:
            lost = (
                f"it is empty, and checkpoint {agent.checkpoint_seq}"
                f" holds {agent.checkpoint_l1_keys} keys"
            )
        if lost:
            raise MemoryLost(
                f"working memory was lost since it was recovered ({lost}); recover it first",
                agent_id=agent.agent_id,
                analysis_id=agent.analysis_id,
            )

    def _cache_commands(
        self,
        snap: Snapshot,
        meta: SnapshotMeta,
        backup: Sealed,
        staged: Staged | None = None,
        inline: bool = False,
    ) -> list[tuple[Any, ...]]:
        """The script call that writes the Redis copies; with ``staged``, the deferred
        writes' script call before it (sent on the same connection, so run first), by its
        text with ``inline``: then they are applied before the reply is read, even where
        Redis's script cache is cold (a NOSCRIPT would be run again only after the commit)."""
        keys_, args = self.snapshotter.cache_call(snap, meta, backup)
        cache = ("EVALSHA", self._cache_sha, len(keys_), *keys_, *args)
        if staged is None:
            return [cache]
        head, bkeys, bargs = staged.mem.batch_call(staged.ops, inline=inline)
        return [(*head, *bkeys, *bargs), cache]

    def _cache(
        self,
        cp: Checkpoint,
        snap: Snapshot,
        copies: tuple[SnapshotMeta, Sealed] | None,
        read: Callable[[], Any],
    ) -> None:
        """After the commit: the Redis copies' reply, and the slow path when the script was
        not loaded, or the secondary could not take a delta. Never over newer copies.
        Nothing for a quiet save (``copies`` None: none were sent)."""
        if copies is None:
            return
        meta, backup = copies
        try:
            try:
                reply = read()
                if isinstance(reply, redis.ConnectionError | redis.TimeoutError | OSError):
                    reply = None
            except (redis.RedisError, OSError):
                reply = None  # the copies are written again below, once
            if isinstance(reply, list) and reply[1] != -1:
                return
            if isinstance(reply, redis.ResponseError) and not isinstance(
                reply, redis.exceptions.NoScriptError
            ):
                raise StoreUnavailable(f"Redis refused the copies: {reply}")
            with redis_errors(cp.agent_id):
                keys_, args = self.snapshotter.cache_call(
                    snap, meta, backup, whole=isinstance(reply, list)
                )
                self.redis.register_script(scripts.CACHE)(keys=keys_, args=args)
        except StoreUnavailable as exc:
            # durable in PostgreSQL already, and restore never trusts an older backup
            self.snapshotter.forget(cp.agent_id)
            raise StoreUnavailable(
                f"checkpoint {cp.checkpoint_id} is in PostgreSQL, but Redis refused its"
                f" backup and snapshot: {exc.message}",
                checkpoint_id=cp.checkpoint_id,
                agent_id=cp.agent_id,
            ) from None

    def _compact_log(self, cp: Checkpoint) -> None:
        """Let the agent's L1 log drop what no snapshot restore can need any more."""
        assert self.journal is not None
        with self.pg.connection() as conn:
            rows = conn.execute(
                sql.SNAPSHOT_SEQS, (cp.analysis_id, cp.agent_type, PG_SNAPSHOTS_TRIED)
            ).fetchall()
        self.journal.compact(cp.agent_id, [int(r[0] or 0) for r in rows])
