"""Restoring an agent's L1 from a snapshot, atomically, and verifying the result."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import msgpack
import orjson
import redis
from psycopg_pool import ConnectionPool

from amber import codec, observe
from amber.codec import CodecError, Entry
from amber.errors import (
    AmberError,
    ConsistencyError,
    Fenced,
    InvalidIdentifier,
    MemoryContended,
    StoreUnavailable,
)
from amber.keys import Keys, check_id, check_key, check_keys, check_uuid
from amber.memory import scripts
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


@dataclass(frozen=True)
class Held:
    """What an agent's L1 index named when it was read, and the sequence and epoch it was
    read at: the keys a restore replaces. The restore script is refused (and the index
    read again) if the memory was written since, so no key written in between is left
    behind outside the new index."""

    names: Collection[str]
    seq: int | bytes
    """The sequence, as read or as Redis stores it (the script reads both as numbers)."""
    epoch: str | bytes | None


RESTORE_TRIES = 3
"""Restores tried while another writer keeps changing the memory, before giving up."""


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
        actual = loaded.stored_hash or codec.memory_hash(loaded.memory)
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


Flat = bytes | str | list[bytes | str]
"""A value as the RESTORE script takes it: a string's bytes (or its text, packed as the
same UTF-8 bytes), or a collection as a flat list (zset scores as Redis parses them)."""


def _flat(rtype: str, v: Any, name: str) -> Flat:
    """A decoded value as the RESTORE script takes it."""
    if rtype == "string":
        return cast(bytes, v)
    if not v:
        raise CodecError(f"key {name!r}: an empty {rtype} cannot exist in Redis")
    if rtype == "list":
        return cast(list[bytes | str], v)
    if rtype == "set":
        return list(cast(set[bytes], v))
    if rtype == "hash":
        return [b for pair in cast(dict[bytes, bytes], v).items() for b in pair]
    return [b for m, score in cast(list[tuple[bytes, float]], v) for b in (repr(score), m)]


def _decoded_flat(name: str, c: Canon) -> Flat:
    """A key in canonical form, other than a string stored as text, as the RESTORE script
    takes it: decoded (``CodecError`` if malformed)."""
    rtype, v, _ = c
    return _flat(rtype, codec.decode_value(rtype, v, f"key {name!r}"), name)


def apply_memory(
    client: redis.Redis,
    keys: Keys,
    agent_id: str,
    memory: Mapping[str, Entry],
    seq: int,
    ttl_ms: int,
    token: int | None = None,
) -> str:
    """Replace the agent's whole L1 with ``memory`` in one Lua script (atomic), as a new
    incarnation; returns its epoch. With ``token`` (the restoring run's) the script is
    refused (``Fenced``) when a later run fenced the memory, else it sets the fence.

    Written and verified in one pass: the script returns the SHA-1 of the payload it
    received and checks every collection it wrote (its type and members) and the index;
    a payload that arrived other than sent, or a key that does not hold it, is
    ``ConsistencyError``. A string is stored by ``SET`` or ``MSET`` exactly as received.

    Keys with an own TTL in the snapshot (``ttl_ms`` > 0) get it back, still marked as
    intended; the others get ``ttl_ms``. Stale keys are those the index lists. Keys an
    expired index no longer names cannot be read through amber and expire by their own TTL.
    """
    names = check_keys(list(memory))
    entries = [memory[n] for n in names]
    types: list[str] = [e.type for e in entries]
    values = [_flat(e.type, e.value, n) for n, e in zip(names, entries, strict=True)]
    ttls = [max(e.ttl_ms, 0) for e in entries]
    return _apply(client, keys, agent_id, names, (types, values, ttls), seq, ttl_ms, token)


def apply_canon(
    client: redis.Redis,
    keys: Keys,
    agent_id: str,
    canon: Mapping[str, Canon],
    seq: int,
    ttl_ms: int,
    token: int | None = None,
    held: Held | None = None,
) -> str:
    """:func:`apply_memory` of a memory in canonical form (a snapshot as stored), without
    building its entries first; ``CodecError`` if a value is malformed. ``held``: what
    the agent's index named when the caller read it (None: read here)."""
    names = check_keys(list(canon))
    items = list(canon.values())  # in the order of ``names``
    types: list[str] = [c[0] for c in items]
    # a string stored as text (the common case) is packed as it is, with no call per key
    values: list[Flat] = [
        c[1] if c[0] == "string" and c[1].__class__ is str else _decoded_flat(n, c)
        for n, c in zip(names, items, strict=True)
    ]
    ttls = [c[2] if c[2] > 0 else 0 for c in items]
    return _apply(client, keys, agent_id, names, (types, values, ttls), seq, ttl_ms, token, held)


def _apply(
    client: redis.Redis,
    keys: Keys,
    agent_id: str,
    names: list[str],
    lists: tuple[list[str], list[Flat], list[int]],
    seq: int,
    ttl_ms: int,
    token: int | None,
    held: Held | None = None,
) -> str:
    """The RESTORE script's call and the check of its reply (:func:`apply_memory`). The
    stale keys it deletes are the names the index held (``held``, else read here) that
    the new memory does not; the script is refused, and the index read again, when the
    memory was written since they were read (``RESTORE_TRIES`` times at most)."""
    index_key, seq_key = keys.l1_index(agent_id), keys.l1_seq(agent_id)
    writing = set(names)
    base = keys.l1_base(agent_id)
    payload = msgpack.packb(lists, use_bin_type=False)  # the types, values and own TTLs
    epoch = f"r{seq}:{uuid.uuid4().hex[:16]}"
    script = client.register_script(scripts.RESTORE)
    for _ in range(RESTORE_TRIES):
        with redis_errors(agent_id):
            if held is None:
                held = _read_held(client, keys, agent_id)
            stale = set(held.names) - writing
            reply = script(
                keys=[
                    index_key,
                    seq_key,
                    keys.l1_epoch(agent_id),
                    keys.l1_changes(agent_id),
                    *[base + n for n in names],
                    *[base + n for n in sorted(stale)],
                    keys.l1_fence(agent_id),
                ],
                args=[payload, len(names), ttl_ms, seq, epoch, base,
                      "" if token is None else token, held.seq, held.epoch or ""],
            )  # fmt: skip
        written, received, bad = cast(list[Any], reply)
        if int(written) == -1:  # written to since the index was read: read it again
            held = None
            continue
        received = received.decode() if isinstance(received, bytes) else str(received)
        if int(written) != len(names) or received != hashlib.sha1(payload).hexdigest() or bad:
            raise ConsistencyError(
                f"restored L1 does not match its snapshot: {int(bad)} key(s) differ"
                f" or the payload arrived changed",
                agent_id=agent_id,
                expected_keys=len(names),
            )
        return epoch
    raise MemoryContended(
        f"working memory was written to while it was being restored, {RESTORE_TRIES} times:"
        " another writer is using it (fence it off with a run's token first)",
        agent_id=agent_id,
    )


def _read_held(client: redis.Redis, keys: Keys, agent_id: str) -> Held:
    """The names the agent's index holds now, with the sequence and epoch read just before
    them: a write in between bumps the sequence, so the restore is refused, never blind
    to a key (no transaction needed)."""
    with client.pipeline(transaction=False) as pipe:
        pipe.get(keys.l1_seq(agent_id))
        pipe.get(keys.l1_epoch(agent_id))
        pipe.hkeys(keys.l1_index(agent_id))
        # a key of another type (WRONGTYPE) reads as absent: the restore replaces it
        seq, epoch, raw = (
            None if isinstance(r, redis.ResponseError) else r
            for r in pipe.execute(raise_on_error=False)
        )
    return Held(
        _valid_names(cast(list[bytes], raw or [])),
        cast(bytes | None, seq) or 0,
        cast(bytes | None, epoch),
    )


def _valid_names(raw: list[bytes]) -> set[str]:
    """Index names that are key names amber could have written (garbage is left to expire)."""
    try:
        return set(check_keys([k.decode() for k in raw]))
    except (UnicodeDecodeError, InvalidIdentifier):
        pass  # some are bad: sort them out one by one
    names = set()
    for k in raw:
        try:
            names.add(check_key(k.decode()))
        except (UnicodeDecodeError, InvalidIdentifier):
            log.warning("skipping a bad name in an L1 index: %r", k)
    return names


Loader = Callable[[], Loaded | None]


def _loader(found: Loader | str) -> Loader:
    """``found``, or a loader raising why a row could not be read."""
    if not isinstance(found, str):
        return found

    def load() -> Loaded:
        raise ConsistencyError(f"snapshot unreadable: {found}")

    return load


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
        if meta_raw is None:
            return None
        meta = SnapshotMeta.unseal(cast(bytes, meta_raw))
        canon: dict[str, Canon] = {}
        for raw_name, raw_item in cast(dict[bytes, bytes], fields).items():
            name = raw_name.decode("utf-8", "replace")
            try:
                rtype, value, ttl = orjson.loads(raw_item)
            except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
                raise CodecError(f"secondary key {name!r} is malformed: {exc}") from None
            canon[name] = canon_of(name, {"type": rtype, "value": value, "ttl_ms": ttl})
        total = codec.digest_sum(canon)
        return loaded_canon("redis_secondary", canon, total, meta.hash, meta.seq, meta.epoch)

    def load_postgres(self, analysis_id: object, agent_type: str) -> Loaded | None:
        """The newest snapshot stored with checkpoints in PostgreSQL that verifies."""
        chain = self._pg_chain(analysis_id, agent_type)[1]
        return chain.loaded(-1) if chain else None

    def _pg_chain(
        self, analysis_id: object, agent_type: str, below: int = 2**62
    ) -> tuple[int | None, FoldedChain, str | None]:
        """The newest chain below checkpoint ``below``: the checkpoint its whole snapshot is
        in (None: no chain), its sound snapshots oldest first, and why it stops early."""
        aid, atype = check_uuid(analysis_id), check_id(agent_type, "agent_type")
        with self.pg.connection() as conn:
            rows = chain_rows(conn, aid, atype, below)
        if not rows:
            return None, FoldedChain(), None
        return int(rows[0][0]), *fold_chain(rows)

    def _pg_candidates(self, analysis_id: object, agent_type: str) -> Iterator[Loader | str]:
        """PostgreSQL's snapshots, newest sound one first, and why a newer one was not
        (a str); an older chain when the newest chain's whole snapshot is unreadable."""
        below, tried = 2**62, 0
        while tried < PG_SNAPSHOTS_TRIED:
            base, chain, error = self._pg_chain(analysis_id, agent_type, below)
            if base is None:
                return
            if error:
                yield error
            for k in reversed(range(len(chain))):
                yield functools.partial(chain.loaded, k)
                tried += 1
                if tried >= PG_SNAPSHOTS_TRIED:
                    return
            below = base

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
        ``Fenced`` when a run with a higher token than ``token`` took the memory over."""
        t0 = time.perf_counter()
        self.verifier.check_snapshot(agent_id, loaded)
        epoch = apply_canon(  # verified by the script that writes it
            self.redis, self.keys, agent_id, loaded.canon, loaded.seq, self.ttl_ms, token, held
        )
        return RestoreReport(
            loaded.source, len(loaded.canon), loaded.seq, loaded.hash, elapsed_ms(t0), True, epoch
        )

    def _candidates(
        self, agent_id: str, analysis_id: object, agent_type: str
    ) -> Iterator[tuple[str, Loader]]:
        """(source, loader) pairs to try in order: the secondary, then PostgreSQL, newest first."""
        yield "redis_secondary", lambda: self.load_secondary(agent_id)
        for found in self._pg_candidates(analysis_id, agent_type):
            yield "postgresql_checkpoint", _loader(found)

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
