"""The saver's core: every checkpoint read and write, in one sync implementation.

``AmberSaver`` calls it directly; ``AsyncAmberSaver`` runs it in a worker thread.

*put* serializes only the channels whose version is new, writes them and the
checkpoint row in one PostgreSQL statement and commit (``PUT_CHECKPOINT``, under the
thread's lock shared), keeps the same copy in this process and leaves the sealed hot
copy to be written to Redis behind it (``HotWrites``: a compare-and-set on the row's
``seq``, once this process's puts pause). A put is acknowledged when PostgreSQL has
committed; a Redis that refuses costs speed, never correctness.

*get_tuple* takes a copy of the namespace's newest checkpoint: the one this process
holds (it wrote or read it), else Redis's; then asks PostgreSQL for the checkpoint with
that copy's ``seq`` as known: one round trip returns the row's ``seq`` and pending
writes, and its body and blobs only when the copy is not that row's. PostgreSQL is the
authority; a copy is used only when the sequences match, and a stale or damaged Redis
copy is replaced from PostgreSQL on the spot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import psycopg
import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from psycopg_pool import ConnectionPool

from amber import codec
from amber.engines.overlap import Overlapped
from amber.errors import (
    AmberError,
    CheckpointCorrupt,
    InvalidIdentifier,
    InvalidValue,
    PayloadRefused,
)
from amber.keys import Keys
from amber.langgraph import scripts
from amber.langgraph import sql as lsql
from amber.langgraph.copies import Copy, CopyCache, HotWrites, Job
from amber.langgraph.records import (
    EMPTY,
    Blob,
    Body,
    Write,
    body_document,
    checked,
    hot_copy,
    pack,
    parse_hot_copy,
)
from amber.langgraph.serde import StrictSerializer
from amber.langgraph.targets import Target, metadata_json, text_id

log = logging.getLogger("amber.langgraph")

PAGE = 32
"""Checkpoints fetched per round trip when listing."""

CACHE_BYTES = 64 * 1024 * 1024
"""Default bound of the process-local copies of each namespace's newest checkpoint."""

_PUT = Overlapped("amber_lg_put", lsql.PUT_CHECKPOINT)


@dataclass
class _Head:
    thread_id: str
    ns: str
    checkpoint_id: str
    seq: int
    body: Body | None
    digest: bytes
    writes: list[tuple[Write, bytes]] = field(default_factory=list)


@dataclass
class _Rows:
    heads: list[_Head]
    blobs: dict[tuple[str, str], dict[tuple[str, str], Blob]]
    """Verified blobs by (thread, namespace), then (channel, version)."""

    def blobs_of(self, head: _Head) -> dict[tuple[str, str], Blob]:
        """The blobs of the head's thread and namespace."""
        return self.blobs.get((head.thread_id, head.ns), {})


class SaverCore:
    """Reads and writes LangGraph checkpoints in PostgreSQL, with verified Redis hot copies."""

    def __init__(
        self,
        client: redis.Redis,
        pool: ConnectionPool,
        keys: Keys,
        *,
        hot_ttl_s: int,
        ttl_s: float | None = None,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        if ttl_s is not None and not ttl_s > 0:
            raise InvalidValue("ttl must be a positive number of seconds", field="ttl")
        self.redis = client
        self.pg = pool
        self.keys = keys
        self.hot_ttl_ms = int(hot_ttl_s * 1000)
        self.ttl_s = ttl_s
        self.cache = CopyCache(cache_bytes)
        self.hot = HotWrites(client.register_script(scripts.WRITE_HEAD))
        self._read_head = client.register_script(scripts.READ_HEAD)

    # -- writes ------------------------------------------------------------------------
    def put(
        self,
        serde: StrictSerializer,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint: the new channel versions and its row, then its hot copy."""
        at = Target.of(config)
        cid = text_id(checkpoint.get("id"), "checkpoint_id")
        md = cast(dict[str, Any], get_serializable_checkpoint_metadata(config, metadata))
        values: Mapping[str, Any] = checkpoint.get("channel_values") or {}
        versions: ChannelVersions = checkpoint.get("channel_versions") or {}
        held = self.cache.get((at.thread_id, at.ns))
        cached = held.blobs if held is not None else {}
        brought = {ch: self._blob(serde, at, ch, ver, values) for ch, ver in new_versions.items()}
        new = list(brought.values())
        named: list[Blob] = []  # the version of each channel the checkpoint names
        refs: list[Blob] = []  # those it does not bring: held, else serialized again
        witnessed = held is not None
        for ch, ver in versions.items():
            version = str(ver)
            blob = brought.get(ch)
            if blob is None or blob.version != version:
                hit = cached.get(ch)
                blob = hit if hit is not None and hit.version == version else None
                witnessed = witnessed and blob is not None
                blob = blob or self._blob(serde, at, ch, ver, values)
                refs.append(blob)
            named.append(blob)
        witness = held if witnessed else None
        typed = serde.dumps_typed(body_document(checkpoint, md, at.checkpoint_id))
        body = Body.of(cid, typed[1])
        run_id = md.get("run_id")
        params = {
            "thread_id": at.thread_id,
            "ns": at.ns,
            "checkpoint_id": cid,
            "run_id": run_id if isinstance(run_id, str) else None,
            "metadata": metadata_json(md),
            "body": body.data,
            "body_size": body.size,
            "body_sha256": body.digest(),
            "ttl": self.ttl_s,
            # the checkpoint held names every version this one only names (see lg_put)
            "witness": witness.body.checkpoint_id if witness is not None else None,
            "witness_seq": witness.seq if witness is not None else None,
        }
        seq, missing = self._insert(params, named, new, refs)
        if missing:  # pruned since this run read them: store them again from the values
            gone = set(missing)
            again = [b for b in refs if b.channel in gone]
            seq, missing = self._insert(
                params, named, [*new, *again], [b for b in refs if b.channel not in gone]
            )
        if seq is None:
            raise CheckpointCorrupt(
                f"channel values {missing} this checkpoint needs keep disappearing",
                thread_id=at.thread_id,
                checkpoint_ns=at.ns,
                checkpoint_id=cid,
            )
        self.cache.put((at.thread_id, at.ns), Copy(seq, body, {b.channel: b for b in named}))
        self._store_hot(at, seq, body, named)
        return at.config(cid)

    @staticmethod
    def _blob(
        serde: StrictSerializer,
        at: Target,
        channel: str,
        version: object,
        values: Mapping[str, Any],
    ) -> Blob:
        try:
            typed = serde.dumps_typed(values[channel]) if channel in values else (EMPTY, b"")
        except InvalidValue as exc:
            raise InvalidValue(exc.message, channel=channel, thread_id=at.thread_id) from None
        return Blob.of(channel, str(version), typed)

    def _insert(
        self,
        params: dict[str, Any],
        named: Sequence[Blob],
        new: Sequence[Blob],
        refs: Sequence[Blob],
    ) -> tuple[int | None, list[str]]:
        """Run ``PUT_CHECKPOINT`` (``lsql.put_params``): ``(seq, [])``, or ``(None,
        channels)`` whose versions are missing."""
        try:
            params = lsql.put_params(params, named, new, refs)
            with self.pg.connection() as conn:
                row = _PUT.execute(conn, params)
        except psycopg.DataError as exc:
            raise InvalidValue(
                f"checkpoint cannot be stored: {exc}".strip(), thread_id=params["thread_id"]
            ) from None
        assert row is not None
        return (None if row[0] is None else int(row[0])), orjson.loads(row[1] or b"[]")

    def put_writes(
        self,
        serde: StrictSerializer,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for the checkpoint ``config`` names."""
        at = Target.of(config)
        if at.checkpoint_id is None:
            raise InvalidIdentifier(
                "put_writes needs config['configurable']['checkpoint_id']", field="checkpoint_id"
            )
        task = text_id(task_id, "task_id")
        rows = []
        for i, (channel, value) in enumerate(writes):
            try:
                typed = serde.dumps_typed(value)
            except InvalidValue as exc:
                raise InvalidValue(exc.message, channel=channel, task_id=task) from None
            data, size = pack(typed[1])
            idx = WRITES_IDX_MAP.get(channel, i)
            rows.append(Write(task, idx, channel, typed[0], data, size, task_path))
        if not rows:
            return
        special = all(w.channel in WRITES_IDX_MAP for w in rows)
        params = {
            "thread_id": at.thread_id,
            "ns": at.ns,
            "checkpoint_id": at.checkpoint_id,
            "task_id": task,
            "task_path": text_id(task_path, "task_path", empty_ok=True),
            "idx": [w.idx for w in rows],
            "channel": [w.channel for w in rows],
            "type": [w.type for w in rows],
            "data": [w.data for w in rows],
            "size": [w.size for w in rows],
            "sha256": [w.digest() for w in rows],
        }
        try:
            with self.pg.connection() as conn:
                conn.execute(lsql.UPSERT_WRITES if special else lsql.INSERT_WRITES, params)
        except psycopg.DataError as exc:
            raise InvalidValue(f"writes cannot be stored: {exc}".strip(), task_id=task) from None

    # -- the hot copy ------------------------------------------------------------------------
    def _hot_args(
        self, at: Target, seq: int, body: Body, blobs: list[Blob]
    ) -> tuple[list[Any], list[Any]]:
        """``scripts.WRITE_HEAD``'s KEYS and ARGV for the copy of a row."""
        # not compressed again: its blobs of COMPRESS_MIN bytes or more are already, so
        # the copy takes about the bytes its rows take in PostgreSQL (a 10 KB copy: 1 us
        # against 30 to 74 us to compress it)
        raw = hot_copy(body, blobs)
        sealed = codec.seal(seq, raw, codec.store(raw))
        head = scripts.head_name(seq, body.checkpoint_id)
        fields = [scripts.copy_field(at.ns), scripts.head_field(at.ns)]
        return [self.keys.lg_heads(at.thread_id)], [*fields, sealed, head, self.hot_ttl_ms]

    def _store_hot(self, at: Target, seq: int, body: Body, blobs: list[Blob]) -> None:
        """Leave the hot copy of a row to be written behind (``HotWrites``)."""
        job = Job(seq, lambda: self._hot_args(at, seq, body, blobs))
        self.hot.later((at.thread_id, at.ns), job)

    def _load_hot(self, at: Target) -> Copy | None:
        key = self.keys.lg_heads(at.thread_id)
        fields = [scripts.copy_field(at.ns), scripts.head_field(at.ns)]
        got: list[Any] | None
        try:
            if at.checkpoint_id is None:
                copy, head = self.redis.hmget(key, fields)
                got = None if copy is None or head is None else [head, copy]
            else:  # fetch the copy only if it is the checkpoint wanted
                got = self._read_head(keys=[key], args=[*fields, at.checkpoint_id])
        except (redis.RedisError, OSError) as exc:
            log.warning("hot copy of %r not read (%s): using PostgreSQL", at, exc)
            return None
        if not got or len(got) != 2:
            return None
        try:
            name = bytes(got[0]).decode()
            seq, raw = codec.unseal(bytes(got[1]))
            body, blobs = parse_hot_copy(raw)
            if name != scripts.head_name(seq, body.checkpoint_id):
                raise codec.CodecError(f"its head {name!r} names another copy")
        except (AmberError, ValueError) as exc:
            log.warning("hot copy of %r not trusted: %s", at, exc)
            return None
        return Copy(seq, body, {b.channel: b for b in blobs})

    # -- reads ---------------------------------------------------------------------------------
    def get_tuple(self, serde: StrictSerializer, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (the newest of its namespace without an id)."""
        at = Target.of(config)
        held = copy = self.cache.get((at.thread_id, at.ns))  # this process wrote or read it,
        if copy is None or at.checkpoint_id not in (None, copy.body.checkpoint_id):
            held, copy = None, self._load_hot(at)  # else another one wrote it to Redis
        statement, params = lsql.checkpoint_rows(at.thread_id, at.ns, at.checkpoint_id)
        rows = self._rows(statement, params, known=copy.seq if copy else -1)
        if not rows.heads:
            return None
        head = rows.heads[0]
        matched = copy is not None and head.body is None
        if copy is not None and matched and copy.body.checkpoint_id == head.checkpoint_id:
            by_key = {(b.channel, b.version): b for b in copy.blobs.values()}
            found, used = self._tuple(serde, head, copy.body, by_key)
            body = copy.body
        else:
            if head.body is None:  # the copy changed between the two reads: ask again
                rows = self._rows(statement, params, known=-1)
                if not rows.heads:
                    return None
                head = rows.heads[0]
            matched = False
            body = self._body(head)
            found, used = self._tuple(serde, head, body, rows.blobs_of(head))
            if at.checkpoint_id is None:
                self._store_hot(at, head.seq, body, used)
        newest = at.checkpoint_id is None or matched
        if newest and (held is None or held.seq != head.seq):  # keep it at hand
            kept = Copy(head.seq, body, {b.channel: b for b in used})
            self.cache.put((at.thread_id, at.ns), kept)
        return found

    def pages(
        self,
        serde: StrictSerializer,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[list[CheckpointTuple]]:
        """Checkpoints newest first, a page of tuples at a time."""
        thread_id = ns = cid = None
        if config is not None:
            conf = config.get("configurable") or {}
            if conf.get("thread_id") is not None:
                thread_id = text_id(conf["thread_id"], "thread_id")
            if conf.get("checkpoint_ns") is not None:
                ns = text_id(conf["checkpoint_ns"], "checkpoint_ns", empty_ok=True)
            if conf.get("checkpoint_id") is not None:
                cid = text_id(conf["checkpoint_id"], "checkpoint_id")
        before_id = None if before is None else Target.of(before).checkpoint_id
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidValue("limit must be a non-negative integer", field="limit")
        try:
            wanted = None if filter is None else orjson.dumps(filter).decode()
        except TypeError as exc:
            raise InvalidValue(f"filter is not JSON: {exc}", field="filter") from None
        left = limit
        after: tuple[str, str, str] | None = None
        while left is None or left > 0:
            page = PAGE if left is None else min(PAGE, left)
            statement, params = lsql.checkpoint_rows(
                thread_id, ns, cid, metadata=wanted, before=before_id, after_row=after, limit=page
            )
            rows = self._rows(statement, params, known=-1)
            yield [self._tuple(serde, h, self._body(h), rows.blobs_of(h))[0] for h in rows.heads]
            if len(rows.heads) < page:
                return
            last = rows.heads[-1]
            after = (last.checkpoint_id, last.thread_id, last.ns)
            left = None if left is None else left - len(rows.heads)

    def _rows(self, statement: str, params: dict[str, Any], *, known: int) -> _Rows:
        try:
            with self.pg.connection() as conn:
                # binary: blobs come as their bytes, not as hex to decode
                found = conn.execute(statement, {**params, "known": known}, binary=True)
                records = found.fetchall()
        except psycopg.DataError as exc:
            raise InvalidValue(f"checkpoint query refused: {exc}".strip()) from None
        heads: dict[tuple[str, str, str], _Head] = {}
        blobs: dict[tuple[str, str], dict[tuple[str, str], Blob]] = {}
        writes: list[tuple[tuple[str, str, str], Write, bytes]] = []
        for kind, tid, ns, cid, name, ver, typ, idx, path, data, size, digest, seq in records:
            if kind == "c":
                body = None if data is None else Body(cid, bytes(data), size)
                heads[(tid, ns, cid)] = _Head(tid, ns, cid, seq, body, bytes(digest))
            elif kind == "b":
                blob = Blob(name, ver, typ, bytes(data), size)
                checked(blob, digest, thread_id=tid, checkpoint_ns=ns, channel=name, version=ver)
                blobs.setdefault((tid, ns), {})[(name, ver)] = blob
            else:
                write = Write(ver, idx, name, typ, bytes(data), size, path)
                writes.append(((tid, ns, cid), write, bytes(digest)))
        for key, write, digest in writes:
            heads[key].writes.append((write, digest))
        ordered = sorted(
            heads.values(), key=lambda h: (h.checkpoint_id, h.thread_id, h.ns), reverse=True
        )
        return _Rows(ordered, blobs)

    @staticmethod
    def _body(head: _Head) -> Body:
        assert head.body is not None
        checked(
            head.body,
            head.digest,
            thread_id=head.thread_id,
            checkpoint_ns=head.ns,
            checkpoint_id=head.checkpoint_id,
        )
        return head.body

    @staticmethod
    def _tuple(
        serde: StrictSerializer,
        head: _Head,
        body: Body,
        blobs: Mapping[tuple[str, str], Blob],
    ) -> tuple[CheckpointTuple, list[Blob]]:
        """The tuple of a verified body and its blobs, and the blobs it used."""
        ids = {"thread_id": head.thread_id, "checkpoint_ns": head.ns}
        ids["checkpoint_id"] = head.checkpoint_id
        try:
            doc = serde.loads_typed(("msgpack", body.raw()))
            if not (
                isinstance(doc, dict)
                and isinstance(doc.get("checkpoint"), dict)
                and isinstance(doc.get("metadata"), dict)
                and doc["checkpoint"].get("id") == head.checkpoint_id
            ):
                raise codec.CodecError("its body is not the checkpoint its row names")
            cp = doc["checkpoint"]
            used: list[Blob] = []
            values: dict[str, Any] = {}
            for ch, ver in (cp.get("channel_versions") or {}).items():
                blob = blobs.get((ch, str(ver)))
                if blob is None:
                    raise codec.CodecError(f"the value of channel {ch!r} at {ver} is missing")
                used.append(blob)
                if blob.type != EMPTY:
                    values[ch] = serde.loads_typed(blob.typed())
            writes = []
            for w, digest in sorted(head.writes, key=lambda wd: _write_order(wd[0])):
                checked(w, digest, **ids)
                writes.append((w.task_id, w.channel, serde.loads_typed(w.typed())))
        except PayloadRefused as exc:
            raise PayloadRefused(exc.message, **{**exc.context, **ids}) from None
        except codec.CodecError as exc:
            raise CheckpointCorrupt(f"stored checkpoint: {exc.message}", **ids) from None
        target = Target(head.thread_id, head.ns, None)
        parent = doc.get("parent")
        found = CheckpointTuple(
            config=target.config(head.checkpoint_id),
            checkpoint=cast(Checkpoint, {**cp, "channel_values": values}),
            metadata=cast(CheckpointMetadata, doc["metadata"]),
            parent_config=target.config(parent) if isinstance(parent, str) else None,
            pending_writes=writes,
        )
        return found, used


def _write_order(write: Write) -> tuple[str, str, int]:
    return writes_sort_key(write.task_path, write.task_id, write.idx)
