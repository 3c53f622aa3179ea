"""Operations a ``StateStore`` can log: ADR-003's three, plus any you register.

The default state is ``{"memory": [], "tools": {}, "state": {}}``:

* ``memory_add`` ``{"content": x}`` appends ``x`` to ``memory``;
* ``tool_register`` ``{"name": n, "tool": t}`` sets ``tools[n] = t``;
* ``state_update`` ``{"new_state": {...}}`` merges the mapping into ``state``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amber.errors import WalError

Handler = Callable[[Any, Any], Any]
"""``handler(state, data) -> new state`` for one operation."""


def initial_state() -> dict[str, Any]:
    """The empty agent state the built-in operations work on."""
    return {"memory": [], "tools": {}, "state": {}}


def memory_add(state: Any, data: Any) -> Any:
    """Append ``data["content"]`` to the memory blocks."""
    state["memory"].append(data["content"])
    return state


def tool_register(state: Any, data: Any) -> Any:
    """Register ``data["tool"]`` under ``data["name"]``."""
    state["tools"][data["name"]] = data.get("tool")
    return state


def state_update(state: Any, data: Any) -> Any:
    """Merge ``data["new_state"]`` into the agent's state mapping."""
    state["state"].update(data["new_state"])
    return state


BUILTIN: dict[str, tuple[Handler, str]] = {
    "memory_add": (memory_add, "content"),
    "tool_register": (tool_register, "name"),
    "state_update": (state_update, "new_state"),
}


class Operations:
    """Dispatch ``(state, op, data)`` to the handler registered for ``op``."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {op: fn for op, (fn, _) in BUILTIN.items()}

    def register(self, op: str, handler: Handler) -> None:
        """Add (or replace) the handler of ``op``."""
        if not isinstance(op, str) or not op:
            raise WalError("operation must be a non-empty string", op=op)
        self._handlers[op] = handler

    def check(self, op: str, data: Any) -> None:
        """Refuse, before anything is logged, an unknown op or built-in data missing its key."""
        if op not in self._handlers:
            raise WalError(f"unknown operation {op!r}; register it first", op=op)
        builtin = BUILTIN.get(op)
        if builtin is not None and self._handlers[op] is builtin[0]:
            if not isinstance(data, dict) or builtin[1] not in data:
                raise WalError(f"{op} needs a mapping with key {builtin[1]!r}", op=op)
            if op == "state_update" and not isinstance(data["new_state"], dict):
                raise WalError("state_update needs new_state to be a mapping", op=op)

    def __call__(self, state: Any, op: str, data: Any) -> Any:
        """Apply ``op`` to ``state`` and return the new state."""
        handler = self._handlers.get(op)
        if handler is None:
            raise WalError(f"unknown operation {op!r}; register it first", op=op)
        return handler(state, data)
