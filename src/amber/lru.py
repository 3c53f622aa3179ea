"""``BytesLRU``: a map held in the process, bounded by the bytes of what it holds."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BytesLRU(Generic[K, V]):
    """Values by key, their sizes (given by the caller) summing to at most ``max_bytes``:
    the least recently used go first. A value larger than ``largest`` is not kept. Safe
    to share between threads."""

    def __init__(self, max_bytes: int, largest: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.largest = max_bytes if largest is None else largest
        self._items: OrderedDict[K, tuple[int, V]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value under ``key`` (now the most recently used), if one is kept."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[1]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep ``value`` (of ``size`` bytes) under ``key``, in place of any before it."""
        with self._lock:
            self._pop(key)
            if size > self.largest:
                return
            self._items[key] = (size, value)
            self._bytes += size
            while self._bytes > self.max_bytes and self._items:
                self._bytes -= self._items.popitem(last=False)[1][0]

    def drop(self, key: K) -> None:
        """Forget the value under ``key``, if one is kept."""
        with self._lock:
            self._pop(key)

    def drop_where(self, match: Callable[[K], bool]) -> None:
        """Forget every value whose key ``match``es."""
        with self._lock:
            for key in [k for k in self._items if match(k)]:
                self._pop(key)

    def _pop(self, key: K) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old[0]
