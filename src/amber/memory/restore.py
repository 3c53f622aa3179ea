"""Restoring an agent's L1 from a snapshot, atomically, and verifying the result."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import orjson
import redis
from psycopg_pool import ConnectionPool

from amber import codec, observe
from amber.codec import CodecError
from amber.engines.later import Pending
from amber.errors import (
    AmberError,
    ConsistencyError,
    Fenced,
    MemoryContended,
    StoreUnavailable,
)
from amber.keys import Keys, check_id, check_uuid
from amber.memory import scripts
from amber.memory.apply import Held, apply_canon, apply_memory, read_held
from amber.memory.chain import (
    FoldedChain,
    Loaded,
    canon_of,
    chain_rows,
    fold_chain,
    loaded_canon,
)
from amber.memory.reading import redis_errors
from amber.memory.snapshot import (
    Canon,
    Snapshot,
    SnapshotMeta,
    elapsed_ms,
    read_memory,
)
from amber.schema import sql

log = logging.getLogger("amber.memory")

PG_SNAPSHOTS_TRIED = 3
"""Snapshots in PostgreSQL tried, newest first, before a restore gives up."""


@dataclass(frozen=True)
class RestoreReport:
    """What a restore did: which tier served, how many keys, how long it took."""

    source: str
    keys: int
    seq: int
    hash: str
    ms: float
    verified: bool = True
    epoch: str | None = None
    """The new incarnation the restore started."""


class ConsistencyVerifier:
    """Hash and key-count checks around a restore (DD-016 D3)."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def check_snapshot(self, agent_id: str, loaded: Loaded, decode: bool = False) -> None:
        """Before writing: the snapshot must hash to what its meta says; with ``decode``,
        every value must decode too (``CodecError``: a restore finds that as it writes)."""
        if decode:
            loaded.memory  # noqa: B018 - decoded once, or CodecError
        actual = loaded.actual_hash()
        if actual != loaded.hash:
            raise ConsistencyError(
                f"snapshot from {loaded.source} does not match its hash (corrupted)",
                agent_id=agent_id,
                expected_hash=loaded.hash,
                actual_hash=actual,
            )

    def verify(
        self, agent_id: str, expected_hash: str, expected_keys: int, fmt: int = codec.FORMAT_VERSION
    ) -> Snapshot:
        """After writing: L1 must now hold exactly the snapshot (read in full, trusting
        nothing). Returns what was read; raises ``ConsistencyError`` otherwise."""
        snap = read_memory(self.redis, self.keys, agent_id)
        actual = snap.hash_in(fmt)
        if snap.missing or len(snap.memory) != expected_keys or actual != expected_hash:
            raise ConsistencyError(
                "restored L1 does not match its snapshot",
                agent_id=agent_id,
                expected_hash=expected_hash,
                actual_hash=actual,
                expected_keys=expected_keys,
                actual_keys=len(snap.memory),
            )
        return snap


Loader = Callable[[], Loaded | None]


def _loader(found: Loader | str) -> Loader:
    """``found``, or a loader raising why a row could not be read."""
    if not isinstance(found, str):
        return found

    def load() -> Loaded:
        raise ConsistencyError(f"snapshot unreadable: {found}")

    return load


@dataclass
class _Outcome:
    """A load's result or its error, kept to be given (or raised) when asked for."""

    value: Loaded | None
    error: Exception | None

    @classmethod
    def of(cls, load: Loader) -> _Outcome:
        try:
            return cls(load(), None)
        except Exception as exc:
            return cls(None, exc)

    def get(self) -> Loaded | None:
        if self.error is not None:
            raise self.error
        return self.value


def newer_than(seq: int, hash_: str, secondary: Loaded) -> bool:
    """Whether the memory of sequence ``seq`` and hash ``hash_`` (PostgreSQL's newest) is
    later than the secondary's, or another at the same sequence: a failover can take the
    secondary back with the memory it copied, so it is not trusted to be the newest."""
    return seq > secondary.seq or (seq == secondary.seq and hash_ != secondary.hash)


def _pg_is_newer(rows: list[tuple[Any, ...]], secondary: Loaded | None) -> bool:
    """:func:`newer_than` for the newest of PostgreSQL's chain ``rows`` (``chain_rows``);
    False without rows or a sound secondary (an unreadable one is offered after
    PostgreSQL's anyway)."""
    if not rows or secondary is None:
        return False
    return newer_than(int(rows[-1][4]), str(rows[-1][3]), secondary)


class L1CacheRestorer:
    """Restores an agent's L1: Redis secondary first, then the PostgreSQL checkpoint."""

    def __init__(
        self,
        client: redis.Redis,
        pool: ConnectionPool,
        keys: Keys,
        verifier: ConsistencyVerifier,
        active_ttl: int,
    ) -> None:
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.verifier = verifier
        self.ttl_ms = active_ttl * 1000

    def load_secondary(self, agent_id: str) -> Loaded | None:
        """The snapshot in the Redis secondary (one hash field per key, and its sealed
        meta), decoded, its hash recomputed, not yet compared."""
        with redis_errors(agent_id), self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.l1_snapshot(agent_id))
            pipe.get(self.keys.l1_snapshot_meta(agent_id))
            fields, meta_raw = pipe.execute()
        return self._secondary_of(cast(dict[bytes, bytes], fields), meta_raw)

    def _send_secondary(self, agent_id: str) -> Pending | None:
        """:meth:`load_secondary`'s read, sent now and its reply read later
        (:meth:`_secondary_sent`), so a PostgreSQL round trip overlaps it; None where it
        could not be sent (a cluster client, no connection)."""
        k = self.keys
        pending = Pending.hold(self.redis)
        read = [("HGETALL", k.l1_snapshot(agent_id)), ("GET", k.l1_snapshot_meta(agent_id))]
        if pending is None or not pending.send_now([("MULTI",), *read, ("EXEC",)]):
            return None
        return pending

    def _secondary_sent(self, agent_id: str, pending: Pending) -> Loaded | None:
        """The secondary as :meth:`_send_secondary` read it; read again the ordinary way
        (its errors and retries as :meth:`load_secondary`'s) when that read did not
        come back whole."""
        got = pending.replies()[-1]
        if isinstance(got, list) and len(got) == 2 and isinstance(got[0], list | dict):
            fields, meta_raw = got
            if isinstance(fields, list):  # HGETALL's reply unparsed: name, value, ...
                fields = dict(zip(fields[::2], fields[1::2], strict=True))
            if meta_raw is None or isinstance(meta_raw, bytes):
                return self._secondary_of(fields, meta_raw)
        return self.load_secondary(agent_id)

    def _secondary_of(self, fields: dict[bytes, bytes], meta_raw: object) -> Loaded | None:
        if meta_raw is None:
            return None
        meta = SnapshotMeta.unseal(cast(bytes, meta_raw))
        canon: dict[str, Canon] = {}
        for raw_name, raw_item in fields.items():
            name = raw_name.decode("utf-8", "replace")
            try:
                rtype, value, ttl = orjson.loads(raw_item)
            except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
                raise CodecError(f"secondary key {name!r} is malformed: {exc}") from None
            canon[name] = canon_of(name, {"type": rtype, "value": value, "ttl_ms": ttl})
        total = codec.digest_sum(canon)
        return loaded_canon("redis_secondary", canon, total, meta.hash, meta.seq, meta.epoch)

    def newest_mark(
        self, analysis_id: object, agent_type: str
    ) -> tuple[int, str, str | None] | None:
        """(sequence, hash, epoch) of the memory stored with the agent's newest checkpoint
        that holds one, read without the memory itself; None if none does."""
        aid, atype = check_uuid(analysis_id), check_id(agent_type, "agent_type")
        with self.pg.connection() as conn:
            row = conn.execute(sql.NEWEST_MEMORY, (aid, atype)).fetchone()
        return (int(row[0]), str(row[1]), row[2]) if row and row[0] is not None else None

    def _pg_chain(
        self, analysis_id: object, agent_type: str, below: int = 2**62
    ) -> tuple[int | None, FoldedChain, str | None]:
        """The newest chain below checkpoint ``below``: the checkpoint its whole snapshot is
        in (None: no chain), its sound snapshots oldest first, and why it stops early."""
        rows = self._pg_rows(analysis_id, agent_type, below)
        if not rows:
            return None, FoldedChain(), None
        return int(rows[0][0]), *fold_chain(rows)

    def _pg_rows(self, analysis_id: object, agent_type: str, below: int) -> list[tuple[Any, ...]]:
        aid, atype = check_uuid(analysis_id), check_id(agent_type, "agent_type")
        with self.pg.connection() as conn:
            return chain_rows(conn, aid, atype, below)

    def _pg_candidates(
        self, analysis_id: object, agent_type: str, newest: list[tuple[Any, ...]] | None = None
    ) -> Iterator[Loader | str]:
        """PostgreSQL's snapshots, newest sound one first, and why a newer one was not
        (a str); an older chain when the newest chain's whole snapshot is unreadable.

        The newest is first offered unchecked, to be hashed by the restore that writes
        it while Redis does (``restore_loaded``); asked for more, its chain is folded
        again with its newest row checked, as any older chain is, so a row that does not
        match cuts the chain there and the rows before it are offered next (that first
        offer is not counted among the ``PG_SNAPSHOTS_TRIED``). ``newest``: the newest
        chain's rows, read already."""
        below, tried, tried_seq = 2**62, 0, None
        while tried < PG_SNAPSHOTS_TRIED:
            if below == 2**62 and newest is not None:
                rows = newest
            else:
                rows = self._pg_rows(analysis_id, agent_type, below)
            if not rows:
                return
            chain, error = None, None
            if below == 2**62:
                fast, error = fold_chain(rows, check_newest=False)
                if error is None and len(fast):
                    yield functools.partial(fast.loaded, -1, defer=True)
                    tried_seq = fast.rows[-1].seq  # tried: not offered again below
                else:
                    chain = fast  # folded again, every row checked, where that pass failed
            if chain is None:
                chain, error = fold_chain(rows)
            if error:
                yield error
            for k in reversed(range(len(chain))):
                if chain.rows[k].seq == tried_seq:
                    continue
                yield functools.partial(chain.loaded, k)
                tried += 1
                if tried >= PG_SNAPSHOTS_TRIED:
                    return
            below = int(rows[0][0])

    def take_over(self, agent_id: str, token: int) -> None:
        """Fence the agent's memory off from every run with a lower token (``Fenced`` if
        a run with a higher one already took it over)."""
        with redis_errors(agent_id):
            self.redis.register_script(scripts.FENCE)(
                keys=[self.keys.l1_fence(agent_id)], args=[token]
            )

    def wipe(self, agent_id: str, token: int | None = None) -> str:
        """Replace the agent's L1 with an empty one, as a new incarnation; its epoch."""
        return apply_memory(self.redis, self.keys, agent_id, {}, 0, self.ttl_ms, token)

    def restore_loaded(
        self,
        agent_id: str,
        loaded: Loaded,
        token: int | None = None,
        held: Held | None = None,
    ) -> RestoreReport:
        """Verify, write atomically, verify again. Raises ``ConsistencyError`` on mismatch,
        ``Fenced`` when a run with a higher token than ``token`` took the memory over.

        A snapshot whose keys were not hashed yet (``loaded.unchecked``) is hashed while
        Redis writes it, under an unconfirmed epoch, when the memory it replaces holds no
        keys (lost, or never written): if it does not match, what Redis wrote is replaced
        by an empty memory before ``ConsistencyError`` (see ``apply._apply``: a cluster
        client hashes first; a failed replacing leaves the memory unconfirmed), and no
        one was handed it. Over a memory that holds keys it is hashed first, so a
        snapshot that fails leaves them as they were."""
        t0 = time.perf_counter()

        def check() -> None:
            self.verifier.check_snapshot(agent_id, loaded)

        during = None
        if loaded.unchecked:
            with redis_errors(agent_id):
                held = held or read_held(self.redis, self.keys, agent_id)
            during = None if held.names else check
        if during is None:
            check()
        epoch = apply_canon(  # verified by the script that writes it
            self.redis, self.keys, agent_id, loaded.canon, loaded.seq, self.ttl_ms, token,
            held, during,
        )  # fmt: skip
        return RestoreReport(
            loaded.source, len(loaded.canon), loaded.seq, loaded.hash, elapsed_ms(t0), True, epoch
        )

    def _candidates(
        self, agent_id: str, analysis_id: object, agent_type: str
    ) -> Iterator[tuple[str, Loader]]:
        """(source, loader) pairs to try in order: the secondary and PostgreSQL's chains,
        newest first. Both are read before the first is offered: the secondary's read goes
        out first and its reply is read after PostgreSQL's rows (a restore from
        PostgreSQL, Redis having lost the agent, pays one round trip for both; a cluster
        client, with no connection to hold, reads one after the other). The secondary
        comes first unless PostgreSQL's newest memory is later than it (or another at the
        same sequence): a failover can take the secondary back with the memory. When
        PostgreSQL cannot be read, the secondary is still offered, and why PostgreSQL
        could not be read is raised after it."""
        pending = self._send_secondary(agent_id)
        newest: list[tuple[Any, ...]] | Exception
        try:
            try:
                newest = self._pg_rows(analysis_id, agent_type, 2**62)
            except Exception as exc:  # raised once the secondary was offered
                newest = exc
            read = _Outcome.of(
                (lambda: self.load_secondary(agent_id))
                if pending is None
                else (lambda: self._secondary_sent(agent_id, pending))
            )
        finally:  # an interrupt: the connection goes back, its reply unread
            if pending is not None and not pending.done:
                pending.drop()
        later = isinstance(newest, list) and _pg_is_newer(newest, read.value)
        if not later:
            yield "redis_secondary", read.get
        if isinstance(newest, Exception):
            raise newest
        for found in self._pg_candidates(analysis_id, agent_type, newest):
            yield "postgresql_checkpoint", _loader(found)
        if later:
            yield "redis_secondary", read.get

    def restore_from_snapshot(
        self,
        agent_id: str,
        analysis_id: object,
        agent_type: str,
        want: str | None = None,
        token: int | None = None,
        held: Held | None = None,
    ) -> RestoreReport | None:
        """Restore the newest snapshot that verifies; None if there is no snapshot at all.

        With ``want`` (the memory hash of the checkpoint the agent continues from) the
        snapshot with that hash is restored; only when no tier holds it, the first
        sound one found (the caller then rolls the agent back to it). A tier whose
        snapshot is corrupt or does not verify is reported (logged) and skipped; if
        every tier fails, raises ``ConsistencyError`` listing them. ``held``: what the
        agent's index named when the caller read it (None: read here).
        """
        check_id(agent_id, "agent_id")
        failures: list[str] = []
        other: Loaded | None = None
        for source, load in self._candidates(agent_id, analysis_id, agent_type):
            t0 = time.perf_counter()
            try:
                loaded = load()
                if loaded is None:
                    continue
                if want is not None and loaded.hash != want:
                    self.verifier.check_snapshot(agent_id, loaded, decode=True)
                    other = other or loaded
                    continue
                report = self.restore_loaded(agent_id, loaded, token, held)
                return dataclasses.replace(report, ms=elapsed_ms(t0))
            except (StoreUnavailable, Fenced, MemoryContended):
                raise
            except AmberError as exc:  # corrupt, unverifiable, or a key of the wrong type
                log.warning("L1 restore of %s from %s failed: %s", agent_id, source, exc)
                held = None  # what it may have written is read back before the next try
                observe.emit(observe.VERIFICATION_FAILED, tier=source)
                failures.append(f"{source}: {exc}")
        if other is not None:
            t0 = time.perf_counter()
            report = self.restore_loaded(agent_id, other, token, held)
            return dataclasses.replace(report, ms=elapsed_ms(t0))
        if failures:
            raise ConsistencyError(
                "no snapshot could be restored and verified: " + "; ".join(failures),
                agent_id=agent_id,
                analysis_id=str(analysis_id),
            )
        return None
