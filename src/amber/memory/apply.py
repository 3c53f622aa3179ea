"""Writing an agent's whole L1 into Redis in one script (``scripts.RESTORE``),
atomically, as a new incarnation, and checking what the script says it wrote."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, cast

import msgpack
import redis
from redis.commands.core import Script

from amber import codec
from amber.codec import CodecError, Entry
from amber.engines.later import Pending
from amber.engines.retry import not_run, sha1
from amber.errors import ConsistencyError, InvalidIdentifier, MemoryContended
from amber.keys import Keys, check_key, check_keys
from amber.memory import scripts
from amber.memory.reading import redis_errors
from amber.memory.snapshot import Canon

log = logging.getLogger("amber.memory")


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

CONFIRM_SHA = sha1(scripts.CONFIRM)
"""``scripts.CONFIRM``'s SHA-1, for sending it behind the restore's script."""

_LOST = (redis.ConnectionError, redis.TimeoutError, OSError)
"""A reply standing for a lost connection."""


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

    Written and verified in one pass: the script returns the length of the payload it
    received and checks every collection it wrote (its type and members) and the index;
    a payload that arrived shorter or longer than sent, or a key that does not hold it,
    is ``ConsistencyError``. A string is stored by ``SET`` or ``MSET`` exactly as
    received (the stream it came on is checked by its transport, as every command's is).

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
    during: Callable[[], object] | None = None,
) -> str:
    """:func:`apply_memory` of a memory in canonical form (a snapshot as stored), without
    building its entries first; ``CodecError`` if a value is malformed. ``held``: what
    the agent's index named when the caller read it (None: read here). ``during``: a
    check of the memory, run while Redis writes it under an unconfirmed epoch, or, where
    no connection can be held for the reply (a cluster client), before it is written as
    its own (see :func:`_apply`)."""
    names = check_keys(list(canon))
    items = list(canon.values())  # in the order of ``names``
    types: list[str] = [c[0] for c in items]
    # a string stored as text (the common case) is packed as it is, with no call per key
    values: list[Flat] = [
        c[1] if c[0] == "string" and c[1].__class__ is str else _decoded_flat(n, c)
        for n, c in zip(names, items, strict=True)
    ]
    ttls = [c[2] if c[2] > 0 else 0 for c in items]
    lists = (types, values, ttls)
    return _apply(client, keys, agent_id, names, lists, seq, ttl_ms, token, held, during)


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
    during: Callable[[], object] | None = None,
) -> str:
    """The RESTORE script's call and the check of its reply (:func:`apply_memory`). The
    stale keys it deletes are the names the index held (``held``, else read here) that
    the new memory does not; the script is refused, and the index read again, when the
    memory was written since they were read (``RESTORE_TRIES`` times at most).

    ``during`` (a check of the memory) runs once, while Redis runs the script. The script
    then writes the memory under an unconfirmed epoch (``scripts.UNCONFIRMED``), which
    nothing takes as it is, made the memory's own (``scripts.CONFIRM``) once the check
    passed and the reply checks out; ``MemoryContended`` if the memory changed between.
    Where no connection could be held for the reply (a cluster client has none) or the
    send failed, ``during`` runs before the script is sent, and the memory is written as
    its own at once (:func:`_run`). If ``during`` raises once the script may have run,
    what it wrote is replaced by an empty memory and ``during``'s error raised (an error
    of that replacing instead, the memory left unconfirmed); if the script was refused
    or never ran, only the error."""
    index_key, seq_key = keys.l1_index(agent_id), keys.l1_seq(agent_id)
    writing = set(names)
    base = keys.l1_base(agent_id)
    payload = msgpack.packb(lists, use_bin_type=False)  # the types, values and own TTLs
    epoch = f"r{seq}:{uuid.uuid4().hex[:16]}"
    unconfirmed = scripts.UNCONFIRMED + epoch[1:]
    script = client.register_script(scripts.RESTORE)

    def overlapped() -> None:
        during()  # type: ignore[misc]  # only passed when given

    fence = "" if token is None else token

    def call_args(at: str, read: Held) -> list[Any]:  # the script's ARGV, with epoch ``at``
        return [payload, len(names), ttl_ms, seq, at, base, fence, read.seq, read.epoch or "",
                len(payload)]  # fmt: skip

    confirming = ("EVALSHA", CONFIRM_SHA, 2, keys.l1_epoch(agent_id), keys.l1_fence(agent_id),
                  unconfirmed, epoch, fence)  # fmt: skip
    confirmed: Any = None

    for attempt in range(RESTORE_TRIES):
        check = overlapped if during is not None and attempt == 0 else None
        with redis_errors(agent_id):
            if held is None:
                held = read_held(client, keys, agent_id)
            stale = set(held.names) - writing
            keys_ = [index_key, seq_key, keys.l1_epoch(agent_id), keys.l1_changes(agent_id),
                     *[base + n for n in names], *[base + n for n in sorted(stale)],
                     keys.l1_fence(agent_id)]  # fmt: skip
            args = call_args(epoch, held)
            try:
                if check is None:
                    reply, first = script(keys=keys_, args=args), False
                else:  # unconfirmed while the check runs, unless it had to run first
                    during_args = call_args(unconfirmed, held)
                    reply, first, confirmed = _run_checked(
                        client, script, keys_, during_args, check, args, confirming
                    )
            except _Unchecked as exc:
                if exc.wrote:
                    apply_memory(client, keys, agent_id, {}, 0, ttl_ms, token)
                raise exc.error from None
        written, received, bad = cast(list[Any], reply)
        if int(written) == -1:  # written to since the index was read: read it again
            held = None
            continue
        if int(written) != len(names) or int(received) != len(payload) or bad:
            raise ConsistencyError(
                f"restored L1 does not match its snapshot: {int(bad)} key(s) differ"
                f" or the payload arrived changed",
                agent_id=agent_id,
                expected_keys=len(names),
            )
        if check is not None and not first:
            _confirm(client, keys, agent_id, unconfirmed, epoch, token, confirmed)
        return epoch
    raise MemoryContended(
        f"working memory was written to while it was being restored, {RESTORE_TRIES} times:"
        " another writer is using it (fence it off with a run's token first)",
        agent_id=agent_id,
    )


def _confirm(
    client: redis.Redis,
    keys: Keys,
    agent_id: str,
    unconfirmed: str,
    epoch: str,
    token: int | None,
    reply: Any = None,
) -> None:
    """Make a restored memory's unconfirmed epoch its own (``scripts.CONFIRM``).
    ``reply``: the script's reply where it went out behind the restore's (None: it did
    not, or did not run, or its connection was lost: it is sent here, and a memory it
    confirmed already is confirmed again)."""
    with redis_errors(agent_id):
        if reply is None or _not_run(reply) or isinstance(reply, _LOST):
            reply = _swap_epoch(client, keys, agent_id, unconfirmed, epoch, token)
        elif isinstance(reply, BaseException):  # refused (fenced): raised as amber's
            raise reply
    if not reply:
        raise MemoryContended(
            "working memory was replaced while its restore was being confirmed: another"
            " writer is using it (fence it off with a run's token first)",
            agent_id=agent_id,
        )


def _swap_epoch(
    client: redis.Redis, keys: Keys, agent_id: str, was: str, now: str, token: int | None
) -> bool:
    """The memory's epoch made ``now`` if it is ``was`` (``scripts.CONFIRM``), refused
    below the fence; whether it is ``now``."""
    return bool(
        client.register_script(scripts.CONFIRM)(
            keys=[keys.l1_epoch(agent_id), keys.l1_fence(agent_id)],
            args=[was, now, "" if token is None else token],
        )
    )


def disown(client: redis.Redis, keys: Keys, agent_id: str, epoch: str, token: int | None) -> None:
    """Mark the agent's memory, of incarnation ``epoch``, as one nothing takes as it is
    (unconfirmed, :data:`scripts.UNCONFIRMED`): it lost writes Redis had acknowledged,
    so the next recovery rebuilds it from a snapshot, however its sequence reads. Nothing
    changes if the memory is another incarnation by now; ``Fenced`` below the fence."""
    with redis_errors(agent_id):
        _swap_epoch(client, keys, agent_id, epoch, f"{scripts.UNCONFIRMED}lost:{epoch}", token)


class _Unchecked(Exception):
    """``during`` failed once the script had gone out: whether it may have written."""

    def __init__(self, error: BaseException, wrote: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.wrote = wrote


def _run_checked(
    client: redis.Redis,
    script: Script,
    keys_: list[Any],
    args: list[Any],
    during: Callable[[], object],
    checked: list[Any],
    then: tuple[Any, ...],
) -> tuple[Any, bool, Any]:
    """The script's reply, whether ``during`` ran before the script was sent, and the
    reply of ``then`` where it was sent behind the script (None where it was not).

    The script is sent with ``args`` on a connection held for its reply
    (``engines/later.py``) and ``during`` runs while Redis runs it; once ``during`` has
    passed, ``then`` (the confirmation) goes out on the same connection before the
    script's reply is read, so one wait reads both. Where no connection could be held (a
    cluster client has none) or the send failed, ``during`` runs first, its error coming
    out as it is with nothing sent, and the script is sent with ``checked`` (the
    arguments of a memory already checked). A reply saying the script did not run (not
    loaded yet, a server that refused it, as in a failover) sends it again the ordinary
    way, under the client's retry policy, and ``then``'s reply is not used. An
    ``Exception`` of ``during`` after the send is ``_Unchecked``, saying whether the
    script may have written; any other (an interrupt) is raised as it is, and ``then`` is
    not sent. Either way the reply is read first, so the connection goes back ready; a
    fenced reply is raised as it is, nothing having been written."""
    pending = Pending.send(client, "EVALSHA", script.sha, len(keys_), *keys_, *args)
    if pending is None:
        during()
        return script(keys=keys_, args=checked), True, None
    try:
        during()
    except BaseException as exc:
        got = pending.replies()[0]
        if not isinstance(exc, Exception):
            raise
        if isinstance(got, redis.ResponseError) and str(got).startswith(scripts.FENCED):
            raise got from None
        refused = _not_run(got) or (isinstance(got, list) and int(got[0]) == -1)
        raise _Unchecked(exc, wrote=not refused) from None
    sent = pending.send_more([then])
    got, *after = pending.replies()
    if _not_run(got):  # the script did not run: sent again, under the retry policy
        return script(keys=keys_, args=args), False, None
    if isinstance(got, BaseException):
        raise redis.ConnectionError(str(got)) if isinstance(got, OSError) else got
    return got, False, after[0] if sent and after else None


def _not_run(reply: object) -> bool:
    """Whether a reply (or the error standing for it) says the script did not run."""
    return isinstance(reply, redis.exceptions.NoScriptError) or (
        isinstance(reply, BaseException) and not_run(reply)
    )


def read_held(client: redis.Redis, keys: Keys, agent_id: str) -> Held:
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
