"""The stack a saver or store opened itself, closed with it."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, TypeVar

from amber.stack import Stack, connect

T = TypeVar("T", bound="OwnsStack")


class OwnsStack:
    """Closes the stack it opened (``from_env``) on ``close()`` or at the end of a ``with``;
    a stack handed in by the caller stays the caller's."""

    _owned: Stack | None = None

    def close(self) -> None:
        """Close the stack if this object opened it."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def on_own_stack(make: Callable[[Stack], T], connect_args: dict[str, Any]) -> T:
    """``make(stack)`` on a stack opened as ``amber.connect(**connect_args)`` does, owned
    by what it makes (closed again if making it fails)."""
    stack = connect(**connect_args)
    try:
        made = make(stack)
    except BaseException:
        stack.close()
        raise
    made._owned = stack
    return made
