"""The one serializer amber.langgraph uses: LangGraph's msgpack, rebuilt from an allow-list.

LangGraph's ``JsonPlusSerializer`` imports and calls whatever class a stored value
names unless its strict mode is on, can fall back to pickle, and revives JSON
constructors. amber encodes with it (msgpack only: ``pickle_fallback`` off, so a
value msgpack cannot hold is refused at write time) and decodes with its own
extension hook, which builds a value only when its ``(module, name)`` is on the
allow-list: LangGraph's own safe types (messages, ``Send``, ``Interrupt``,
datetimes, ...) and the types the application names. Anything else, and any
``pickle`` or ``json`` payload, is ``PayloadRefused`` before a module is imported.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from amber.errors import InvalidValue, PayloadRefused

log = logging.getLogger("amber.langgraph")

AllowedType = tuple[str, ...] | type
"""An allow-list entry: a class, or its ``(module, name)``."""

_OPTION = ormsgpack.OPT_NON_STR_KEYS
_ENCODER = jsonplus.JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)


def type_key(entry: AllowedType) -> tuple[str, str]:
    """``(module, name)`` of an allow-list entry."""
    if isinstance(entry, type):
        return entry.__module__, entry.__name__
    if (
        isinstance(entry, tuple)
        and len(entry) == 2
        and all(isinstance(part, str) and part for part in entry)
    ):
        return entry[0], entry[1]
    raise InvalidValue(
        "allowed_types entries are classes or (module, name) pairs", field="allowed_types"
    )


class StrictSerializer:
    """LangGraph's ``SerializerProtocol``: msgpack out, allow-listed types back in, never pickle."""

    def __init__(self, allowed_types: Iterable[AllowedType] = ()) -> None:
        self.allowed: frozenset[tuple[str, str]] = frozenset(
            {(t[0], t[1]) for t in lg_msgpack.SAFE_MSGPACK_TYPES if len(t) == 2}
            | {type_key(t) for t in allowed_types}
        )

    def with_allowlist(self, extra: Iterable[AllowedType]) -> StrictSerializer:
        """A serializer that also rebuilds ``extra`` (LangGraph passes a graph's state types)."""
        return StrictSerializer([*self.allowed, *extra])

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """``(type, bytes)``: ``null``, ``bytes``, ``bytearray`` or ``msgpack``, never pickle."""
        try:
            return _ENCODER.dumps_typed(obj)
        except (TypeError, ValueError, ormsgpack.MsgpackEncodeError) as exc:
            raise InvalidValue(
                f"a value of type {type(obj).__name__} cannot be stored as msgpack"
                f" (amber never pickles): {exc}",
                type=type(obj).__name__,
            ) from None

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """The value of ``(type, bytes)``; ``PayloadRefused`` for pickle, JSON or unknown types."""
        kind, raw = data
        if kind == "msgpack":
            return self.unpack(raw)
        if kind == "null":
            return None
        if kind == "bytes":
            return bytes(raw)
        if kind == "bytearray":
            return bytearray(raw)
        raise PayloadRefused(
            f"stored value of serialization {kind!r} refused: amber reads msgpack only"
            " (never pickle, never JSON constructors)",
            type=kind,
        )

    def unpack(self, raw: bytes) -> Any:
        """Decode msgpack, building extension types only from the allow-list."""
        errors: list[Exception] = []
        hook = self._hook(errors)
        try:
            return ormsgpack.unpackb(raw, ext_hook=hook, option=_OPTION)
        except (ValueError, TypeError) as exc:
            if errors:
                raise errors[0] from None
            raise PayloadRefused(f"stored value is not valid msgpack: {exc}") from None

    def _hook(self, errors: list[Exception]) -> Callable[[int, bytes], Any]:
        def hook(code: int, data: bytes) -> Any:
            try:
                return self._build(code, data, hook)
            except Exception as exc:
                errors.append(exc)
                raise

        return hook

    def _build(self, code: int, data: bytes, hook: Callable[[int, bytes], Any]) -> Any:
        inner = ormsgpack.unpackb(data, ext_hook=hook, option=_OPTION)
        if code == jsonplus.EXT_DELTA_SNAPSHOT:
            return _DeltaSnapshot(inner)
        if code == jsonplus.EXT_NUMPY_ARRAY:
            raise PayloadRefused("stored numpy array refused: not on the allow-list", type="numpy")
        if not (
            isinstance(inner, list | tuple)
            and len(inner) >= 3
            and isinstance(inner[0], str)
            and isinstance(inner[1], str)
        ):
            raise PayloadRefused(f"stored extension {code} is malformed", type=str(code))
        module, name, arg = inner[0], inner[1], inner[2]
        if code == jsonplus.EXT_METHOD_SINGLE_ARG:
            method = inner[3] if len(inner) > 3 else None
            if (module, name, method) not in lg_msgpack.SAFE_MSGPACK_METHODS:
                raise PayloadRefused(
                    f"stored call of {module}.{name}.{method} refused: not on the allow-list",
                    type=f"{module}.{name}",
                )
            return getattr(getattr(importlib.import_module(module), name), str(method))(arg)
        if (module, name) not in self.allowed:
            raise PayloadRefused(
                f"stored value of type {module}.{name} refused: not on the allow-list"
                f" (allow it with allowed_types=[({module!r}, {name!r})] if you trust it)",
                type=f"{module}.{name}",
            )
        cls = getattr(importlib.import_module(module), name)
        try:
            return _construct(code, cls, module, name, arg)
        except Exception as exc:  # an allowed type whose fields changed: keep the data
            log.warning("could not rebuild %s.%s (%s); returning its data", module, name, exc)
            return arg


def _construct(code: int, cls: Any, module: str, name: str, arg: Any) -> Any:
    if code == jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG:
        return cls(arg)
    if code == jsonplus.EXT_CONSTRUCTOR_POS_ARGS:
        if (module, name) == ("langgraph.types", "Send"):
            return jsonplus._send_from_args(arg)
        return cls(*arg)
    if code == jsonplus.EXT_CONSTRUCTOR_KW_ARGS:
        return cls(**arg)
    if code in (jsonplus.EXT_PYDANTIC_V2, jsonplus.EXT_PYDANTIC_V1):
        try:
            return cls(**arg)
        except Exception:
            build = "model_construct" if code == jsonplus.EXT_PYDANTIC_V2 else "construct"
            return getattr(cls, build)(**arg)
    raise PayloadRefused(f"stored extension {code} is unknown", type=f"{module}.{name}")
