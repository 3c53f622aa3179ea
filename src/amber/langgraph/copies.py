"""Copies of each namespace's newest checkpoint held in this process, and the Redis hot
copies written behind the put."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from amber.engines.later import Pending
from amber.langgraph.records import Blob, Body
from amber.lru import BytesLRU

log = logging.getLogger("amber.langgraph")


@dataclass(frozen=True, slots=True)
class Copy:
    """A namespace's newest checkpoint as stored: its row's ``seq``, body and blobs."""

    seq: int
    body: Body
    blobs: dict[str, Blob]
    """By channel."""

    def nbytes(self) -> int:
        """Bytes it holds (for the cache's bound)."""
        return len(self.body.data) + sum(b.nbytes for b in self.blobs.values())


class CopyCache:
    """The newest checkpoint of each namespace this process wrote or read, bounded by bytes
    (least recently used out first). A read uses it, like the Redis copy, only when
    PostgreSQL names its ``seq``; a put takes its unchanged channels from it instead of
    serializing them again."""

    def __init__(self, max_bytes: int) -> None:
        self._copies: BytesLRU[tuple[str, str], Copy] = BytesLRU(max_bytes, max_bytes // 4)

    def get(self, key: tuple[str, str]) -> Copy | None:
        """The copy of a (thread, namespace), if there is one."""
        return self._copies.get(key)

    def put(self, key: tuple[str, str], copy: Copy) -> None:
        """Keep ``copy``; one larger than a quarter of the bound is not kept."""
        self._copies.put(key, copy, copy.nbytes())

    def drop_thread(self, thread_id: str) -> None:
        """Forget every namespace of a thread."""
        self._copies.drop_where(lambda key: key[0] == thread_id)


class HotWrites:
    """Hot copies written behind the put: a put sends its copy's script and returns; the
    reply is read by the next put, by a read of a hot copy, or by :meth:`settle`.

    A copy is a cache that a reader trusts only when PostgreSQL names its sequence, so a
    copy not yet written (or lost with the process) costs a read from PostgreSQL, never
    a wrong one. A failure is logged when its reply is read. A put that finds another
    thread writing makes its call the ordinary way.
    """

    def __init__(self, client: redis.Redis, script: Script) -> None:
        self.client = client
        self.script = script
        self._due: tuple[Pending, list[Any], list[Any]] | None = None
        self._lock = threading.Lock()

    def write(self, keys: list[Any], args: list[Any], behind: bool = True) -> None:
        """Send the copy (``scripts.WRITE_HEAD``'s KEYS and ARGV), its reply read later
        (``behind``) or now."""
        if not behind or not self._lock.acquire(blocking=False):
            self._call(keys, args)
            return
        try:
            self._settle()
            sent = Pending.send(self.client, "EVALSHA", self.script.sha, len(keys), *keys, *args)
            if sent is None:
                self._call(keys, args)
            else:
                self._due = (sent, keys, args)
        finally:
            self._lock.release()

    def settle(self) -> None:
        """Read the reply still due, if any: the copy sent last is then in Redis."""
        with self._lock:
            self._settle()

    def _settle(self) -> None:
        due, self._due = self._due, None
        if due is None:
            return
        sent, keys, args = due
        try:
            reply = sent.reply()
        except (redis.RedisError, OSError) as exc:
            _not_written(keys, exc)
            return
        if isinstance(reply, redis.exceptions.NoScriptError):
            self._call(keys, args)  # Redis lost its scripts meanwhile: loaded again
        elif isinstance(reply, redis.ResponseError):
            _not_written(keys, reply)

    def _call(self, keys: list[Any], args: list[Any]) -> None:
        try:
            self.script(keys=keys, args=args)
        except (redis.RedisError, OSError) as exc:
            _not_written(keys, exc)


def _not_written(keys: list[Any], why: Exception) -> None:
    log.warning("hot copy %r not written (%s): reads use PostgreSQL", keys[0], why)
