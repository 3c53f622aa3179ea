"""Copies of each namespace's newest checkpoint held in this process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from amber.langgraph.records import Blob, Body


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
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str], tuple[int, Copy]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> Copy | None:
        """The copy of a (thread, namespace), if there is one."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[1]

    def put(self, key: tuple[str, str], copy: Copy) -> None:
        """Keep ``copy``; one larger than a quarter of the bound is not kept."""
        size = copy.nbytes()
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[0]
            if size * 4 > self.max_bytes:
                return
            self._items[key] = (size, copy)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (dropped, _) = self._items.popitem(last=False)
                self._bytes -= dropped

    def drop_thread(self, thread_id: str) -> None:
        """Forget every namespace of a thread."""
        with self._lock:
            for key in [k for k in self._items if k[0] == thread_id]:
                self._bytes -= self._items.pop(key)[0]
