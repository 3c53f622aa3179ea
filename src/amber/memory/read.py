"""Reading an agent's working memory as a snapshot: one Lua script per chunk of keys of
one slot, so a snapshot is always a memory that existed at one instant, on a single
server and on a cluster alike; or only what changed since the last one."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import msgpack
import redis

from amber import codec
from amber.codec import Entry, RedisType
from amber.errors import ConsistencyError, InvalidIdentifier, UnsupportedType
from amber.keys import Keys, check_id, check_keys
from amber.memory import scripts
from amber.memory.reading import redis_errors
from amber.memory.snapshot_model import (
    CHUNKED_ATTEMPTS,
    READ_ATTEMPTS,
    READ_CHUNK,
    Canon,
    Snapshot,
    _canonize,
    merge_changes,
)
from amber.memory.working import supported


def _decode_reply(rtype: RedisType, reply: Any) -> codec.Value:
    if rtype == "string":
        return cast(bytes, reply)
    if rtype == "list":
        return list(reply)
    if rtype == "set":
        return set(reply)
    it = iter(reply)
    if rtype == "hash":
        return dict(zip(it, it, strict=True))
    return [(m, float(s)) for m, s in zip(it, it, strict=True)]


class _Reader:
    """Runs ``scripts.READ`` over some of one agent's keys and decodes what comes back."""

    def __init__(self, client: redis.Redis, keys: Keys, agent_id: str) -> None:
        self.client, self.agent_id = client, agent_id
        self.index_key, self.seq_key = keys.l1_index(agent_id), keys.l1_seq(agent_id)
        self.epoch_key = keys.l1_epoch(agent_id)
        self.base = keys.l1_base(agent_id)  # names were checked when written
        self.script = client.register_script(scripts.READ)
        self.repair = client.register_script(scripts.REPAIR_INDEX)

    def read(self, names: list[str], total: int | None, seq: int | None) -> list[Any] | None:
        """Reply items {seq, epoch, entry, type, value, ttl, ...}, or None to start over."""
        reply = self.script(
            keys=[self.index_key, self.seq_key, self.epoch_key, *(self.base + n for n in names)],
            args=[*names, "" if total is None else total, "" if seq is None else seq],
        )
        return _unpack(reply)

    def read_whole(self, chunks: list[list[str]]) -> Snapshot | None:
        """The snapshot of every name the index listed, read in ``chunks`` (one script
        each), or None to start over: the index changed, or chunks saw different
        sequences (every write bumps it, so chunks that agree were read at one instant).

        Each chunk is sent before the one before it is decoded, so Redis reads one while
        Python decodes the other (see :meth:`_replies`).
        """
        total = sum(len(c) for c in chunks)
        memory: dict[str, Entry] = {}
        canon: dict[str, Canon] = {}
        digests: dict[str, int] = {}
        owned: list[str] = []
        missing: list[str] = []
        at: tuple[int, str | None] | None = None
        replies = self._replies(chunks, total)
        try:
            for names, items in zip(chunks, replies, strict=True):
                if items is None:
                    return None
                got = self.decode(names, items)
                if at is None:
                    at = (got.seq, got.epoch)
                elif (got.seq, got.epoch) != at:
                    return None
                memory.update(got.memory)
                missing += got.missing
                _canonize(got.memory, canon, digests, owned)
        finally:
            replies.close()
        assert at is not None  # there is always one chunk, if empty
        total_digest = sum(digests.values())
        return Snapshot(
            self.agent_id,
            memory,
            at[0],
            tuple(missing),
            at[1],
            canon,
            digests,
            total_digest,
            owned=frozenset(owned),
        )

    def _replies(
        self, chunks: list[list[str]], total: int
    ) -> Generator[list[Any] | None, None, None]:
        """Each chunk's reply items (None: start over). The first chunk is read as usual
        (loading the script if Redis lacks it); the others go on one connection of their
        own, each sent before the reply before it is handed over. A lost connection
        starts the read over; a cluster client reads one chunk after another."""
        first = self.read(chunks[0], total, None)
        rest = chunks[1:]
        pool: redis.ConnectionPool | None = getattr(self.client, "connection_pool", None)
        conn = None
        if pool is not None and rest and first is not None:
            with contextlib.suppress(*_LOST):
                conn = pool.get_connection()
        if pool is None or conn is None:  # through the retrying client, one by one
            yield first
            for names in rest:
                yield self.read(names, total, None)
            return
        head = [self.index_key, self.seq_key, self.epoch_key]
        sent = answered = 0

        def send() -> None:
            nonlocal sent
            n = rest[sent]
            args = [*head, *(self.base + x for x in n), *n, total, ""]
            conn.send_command("EVALSHA", self.script.sha, 3 + len(n), *args)  # type: ignore[no-untyped-call]
            sent += 1

        try:
            try:
                send()
            except _LOST:
                conn.disconnect()  # type: ignore[no-untyped-call]
                yield None  # start over: the next attempt reads through the retrying client
                return
            yield first
            while answered < len(rest):
                try:
                    if sent < len(rest):
                        send()
                    reply = conn.read_response()
                except redis.exceptions.NoScriptError:
                    reply = None  # flushed meanwhile: the next attempt loads it again
                except _LOST:
                    conn.disconnect()  # type: ignore[no-untyped-call]
                    sent = answered  # nothing more can come on it
                    yield None  # as above (a failover, a restart): retried, not raised
                    return
                answered += 1
                yield _unpack(reply)
        finally:
            if sent > answered:  # replies still due on it: it cannot serve anyone else
                conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)

    def decode(self, names: list[str], items: list[Any]) -> _Decoded:
        """Each name's entry and value; expired and vanished names; index repairs made."""
        out = _Decoded(_sequence(items[0], self.agent_id), _text(items[1]))
        retyped: dict[str, tuple[str, str, str]] = {}
        memory = out.memory
        for i, name in enumerate(names):
            at = 2 + 4 * i
            raw_entry, actual, value, own_ttl = items[at : at + 4]
            if actual == b"string" and own_ttl == -1 and raw_entry[:7] == b"string:":
                memory[name] = Entry("string", value)  # most keys: read as indexed
                continue
            actual = actual.decode()
            if raw_entry in (None, False):  # the index no longer names it: deleted
                out.gone.append(name)
                continue
            entry = raw_entry.decode()
            if actual == "none":
                if not entry.endswith(":own"):  # an own TTL ran out: meant, not lost
                    out.missing.append(name)
                out.expired.append(name)
                continue
            if not supported(actual):
                raise UnsupportedType(
                    f"key {name!r} holds a {actual}, which amber cannot snapshot",
                    agent_id=self.agent_id,
                    key=name,
                )
            rtype = cast(RedisType, actual)
            ttl = int(own_ttl) if isinstance(own_ttl, int) and own_ttl > 0 else codec.NO_TTL
            out.memory[name] = Entry(rtype, _decode_reply(rtype, value), ttl)
            indexed_type, _, stamp = entry.partition(":")
            if actual != indexed_type:  # another client changed its type: the index follows
                retyped[name] = (entry, actual, f"{actual}:{stamp}")
        if retyped or out.expired:
            self.repair(
                keys=[self.index_key, *(self.base + n for n in (*out.expired, *retyped))],
                args=[len(out.expired), self.base, *(x for t in retyped.values() for x in t)],
            )
        return out


@dataclass
class _Decoded:
    seq: int
    epoch: str | None
    memory: dict[str, Entry] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)


_LOST = (redis.ConnectionError, redis.TimeoutError, OSError)
"""A connection that failed under a read: the read starts over."""


def _unpack(reply: Any) -> list[Any] | None:
    """A READ script's items, or None for its request to start over."""
    return cast(list[Any], msgpack.unpackb(reply, raw=True)) if isinstance(reply, bytes) else None


def _seq20(seq: int) -> str:
    return codec.seal_seq(seq).decode()


def _text(raw: Any) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else None


def read_memory(
    client: redis.Redis, keys: Keys, agent_id: str, guess_empty: bool = False
) -> Snapshot:
    """Read every key of an agent's L1 at one instant. Drops expired keys from the index.

    Lua scripts read the keys the index lists (declared in ``KEYS[]``, one slot), up
    to ``READ_CHUNK`` keys per call; the read starts over if keys were added or removed
    meanwhile, or if any write came between two calls (if writers keep interfering, one
    script reads everything). Raises ``UnsupportedType`` naming a key that another
    client turned into a type amber cannot snapshot.

    ``guess_empty``: the caller expects no keys, so the script is asked first whether
    the index is empty (one round trip instead of two); a wrong guess costs one more.
    """
    agent_id = check_id(agent_id, "agent_id")
    reader = _Reader(client, keys, agent_id)
    with redis_errors(agent_id):
        if guess_empty:
            snap = reader.read_whole([[]])  # the script checks the index has 0 names
            if snap is not None:
                return snap
        for attempt in range(READ_ATTEMPTS):
            names = _names(cast(list[bytes], client.hkeys(reader.index_key)), agent_id)
            step = READ_CHUNK if attempt < CHUNKED_ATTEMPTS else max(len(names), 1)
            chunks = [names[i : i + step] for i in range(0, len(names), step)] or [[]]
            snap = reader.read_whole(chunks)
            if snap is not None:
                return snap
        raise ConsistencyError("L1 keys kept changing during the snapshot", agent_id=agent_id)


def read_changes(
    client: redis.Redis,
    keys: Keys,
    base: Snapshot,
    hint: Iterable[str] = (),
    consume: bool = False,
) -> Snapshot | None:
    """The agent's L1 now, reading only the keys written or deleted since ``base``.

    The write path records every changed name in the agent's changes set, so this
    costs what changed, not the memory's size. ``hint`` names keys the caller expects
    changed (those its own memory object wrote): they are read in the same round trip
    as the changes set; any other changed key costs a second one. None when ``base``
    is no longer a sound starting point (another incarnation, or a secondary that is
    not ``base``): the caller reads the whole memory. Keys with their own TTL are read
    every time, since their expiry is no write.

    ``consume`` lets the new snapshot take over ``base``'s maps instead of copying
    them (a copy is O(keys)): ``base`` must then never be read again, whatever this
    returns or raises.
    """
    agent_id = base.agent_id
    reader = _Reader(client, keys, agent_id)
    script = client.register_script(scripts.READ_CHANGES)
    expected = sorted(set(hint) | base.owned)
    head = [reader.index_key, reader.seq_key, reader.epoch_key, keys.l1_changes(agent_id)]
    head.append(keys.l1_snapshot_meta(agent_id))
    with redis_errors(agent_id):
        for _ in range(READ_ATTEMPTS):
            reply = script(
                keys=[*head, *(reader.base + n for n in expected)], args=[*expected, base.seq]
            )
            items = cast(list[Any], msgpack.unpackb(reply, raw=True))
            seq_raw, epoch_raw, meta_seq, changed_raw = items[:4]
            if _text(epoch_raw) != base.epoch or _text(meta_seq) != _seq20(base.seq):
                return None  # another incarnation, or a secondary that is not the base
            seq = _sequence(seq_raw, agent_id)
            touched = {n.decode() for n in changed_raw} | base.owned
            names, got_items = list(expected), [seq_raw, epoch_raw, *items[4:]]
            extra = sorted(touched - set(expected))
            if extra:  # changed by a writer other than the caller's memory object
                more = reader.read(extra, None, seq)
                if more is None:
                    continue
                names += extra
                got_items += more[2:]
            break
        else:
            raise ConsistencyError("L1 keys kept changing during the snapshot", agent_id=agent_id)
        got = reader.decode(names, got_items)
    if not touched and seq == base.seq:  # nothing changed: an empty delta
        return base.unchanged()
    if got.epoch != base.epoch:
        return None
    missing = tuple(got.missing)
    return merge_changes(base, sorted(touched), got.memory, got.seq, got.epoch, missing, consume)


def _names(raw: list[bytes], agent_id: str) -> list[str]:
    """Key names from the index; a name amber could not have written is a ``ConsistencyError``."""
    try:
        names = sorted(check_keys([k.decode() for k in raw]))
    except (UnicodeDecodeError, InvalidIdentifier) as exc:
        raise ConsistencyError(
            f"the agent's index holds a bad key name: {exc}", agent_id=agent_id
        ) from None
    return names


def _sequence(raw: Any, agent_id: str) -> int:
    """The agent's sequence as stored; garbage there is a ``ConsistencyError``, not a crash."""
    if raw in (None, False):
        return 0
    try:
        seq = int(raw)
    except (TypeError, ValueError):
        raise ConsistencyError(
            f"the agent's sequence key holds {raw!r}, not a sequence", agent_id=agent_id
        ) from None
    if not 0 <= seq < 2**63:
        raise ConsistencyError(f"the agent's sequence {seq} is out of range", agent_id=agent_id)
    return seq
