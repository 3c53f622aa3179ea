"""The record fields that grow at every step, encoded once per entry instead of once per save.

A function agent's thousandth step carries a thousand completed steps, their results
and the functions that made them. Encoding them all again at every save made step 1,000
cost more than step 1 (about 100 µs of ``orjson`` at 1,000 steps), however little the
row then stored. So an agent keeps the bytes its last save made of those fields, and a
step that adds one entry extends them by that entry's bytes.

Kept bytes must be exactly what encoding the field whole would give, whatever else
touched it. The containers amber makes for these fields (``GrowingList``,
``GrowingDict``) count every change made to them; bytes are kept for one container at
one count, and extended only by :meth:`GrowingFields.added`, which the one change it
follows must have made. Any other change (an entry replaced or removed, the container
replaced by the agent's own list or dict, which counts nothing) makes the next save
encode the field whole. What a count cannot see is a change *inside* an entry: so a
field is kept only where its entries cannot be changed in place, its steps' names and
functions (strings), and a function agent's results, which amber alone holds (the
function gets copies of them). A change made by a C function that reaches past a
subclass's methods (``heapq`` on the list, ``dict.update`` called on the class) is not
counted either: these containers are amber's, changed through their methods. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class Counted(Protocol):
    """A container that counts the changes made to it."""

    changes: int

    def __len__(self) -> int: ...


class GrowingList(list[T]):
    """A list that counts every change made to it (``changes``)."""

    changes = 0


class GrowingDict(dict[K, V]):
    """A dict that counts every change made to it (``changes``)."""

    changes = 0


def _counted(apply: Any) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.changes += 1
        return apply(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = apply.__name__
    return method


def _counting(cls: type, names: tuple[str, ...]) -> None:
    """Make each of ``cls``'s methods ``names`` (its base's) count a change first."""
    for name in names:
        setattr(cls, name, _counted(getattr(cls.__mro__[1], name)))


LIST_CHANGES = (
    "append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse",
    "__setitem__", "__delitem__", "__iadd__", "__imul__",
)  # fmt: skip
"""Every method by which a list changes."""

DICT_CHANGES = (
    "__setitem__", "__delitem__", "pop", "popitem", "clear", "update", "setdefault", "__ior__",
)  # fmt: skip
"""Every method by which a dict changes."""

_counting(GrowingList, LIST_CHANGES)
_counting(GrowingDict, DICT_CHANGES)


class GrowingFields:
    """An agent's growing record fields (``names``), as its last save encoded them."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._kept: dict[str, tuple[Counted, int, int, bytes]] = {}
        """By field: the container, its count of changes and its length, and its bytes."""

    def known(self, owner: object) -> dict[str, bytes]:
        """The bytes kept for ``owner``'s fields that are still exactly its containers'
        (``Checkpoint.fields``' ``known``)."""
        out: dict[str, bytes] = {}
        for name, (container, changes, _, raw) in self._kept.items():
            if getattr(owner, name) is container and container.changes == changes:
                out[name] = raw
        return out

    def learn(self, owner: object, fields: Mapping[str, bytes]) -> None:
        """``fields``, a save's, encoded from ``owner`` as it is now: kept for the fields
        this object follows whose containers count their changes."""
        for name in self.names:
            raw = fields.get(name)
            container = getattr(owner, name)
            if raw is not None and isinstance(container, GrowingList | GrowingDict):
                self._kept[name] = (container, container.changes, len(container), raw)

    def added(self, owner: object, name: str, entry: bytes) -> None:
        """``owner``'s field ``name`` has just gained one entry at its end, its only
        change since its bytes were kept, encoded as ``entry`` (``"key":value`` in an
        object, the value in a list): the bytes are extended by it. Bytes kept for the
        container at any other count, or a change that did not add an entry (a key set
        again where it stands), are let go."""
        kept = self._kept.pop(name, None)
        if kept is None:
            return
        container, changes, size, old = kept
        if (
            getattr(owner, name) is not container
            or container.changes != changes + 1
            or len(container) != size + 1
        ):
            return
        raw = old[:-1] + (b"," if size else b"") + entry + old[-1:]
        self._kept[name] = (container, container.changes, size + 1, raw)

    def forget(self, name: str) -> None:
        """Let go of field ``name``'s bytes: it is encoded whole at the next save."""
        self._kept.pop(name, None)
