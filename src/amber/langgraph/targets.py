"""What a LangGraph config points at, checked: thread, namespace, checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig

from amber.errors import InvalidIdentifier

MAX_ID = 1024
"""Longest thread id, namespace or checkpoint id accepted."""


def text_id(value: object, name: str, *, empty_ok: bool = False) -> str:
    """``value`` as an id LangGraph and PostgreSQL agree on, else ``InvalidIdentifier``."""
    if isinstance(value, uuid.UUID) or (isinstance(value, int) and not isinstance(value, bool)):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidIdentifier(
            f"{name} must be a string, got {type(value).__name__}", field=name, value=value
        )
    if not value and not empty_ok:
        raise InvalidIdentifier(f"{name} is empty", field=name, value=value)
    if len(value) > MAX_ID:
        raise InvalidIdentifier(f"{name} is longer than {MAX_ID} characters", field=name)
    if "\x00" in value:
        raise InvalidIdentifier(f"{name} contains a NUL character", field=name, value=value)
    return value


@dataclass(frozen=True, slots=True)
class Target:
    """What a config points at: a thread, a namespace, maybe one checkpoint."""

    thread_id: str
    ns: str
    checkpoint_id: str | None

    @classmethod
    def of(cls, config: RunnableConfig | Mapping[str, Any]) -> Target:
        """The target of a LangGraph config (``configurable`` thread_id, checkpoint_ns, id)."""
        conf = config.get("configurable") if isinstance(config, Mapping) else None
        if not isinstance(conf, Mapping) or conf.get("thread_id") is None:
            raise InvalidIdentifier(
                "config['configurable']['thread_id'] is missing", field="thread_id"
            )
        cid = conf.get("checkpoint_id")
        return cls(
            text_id(conf["thread_id"], "thread_id"),
            text_id(conf.get("checkpoint_ns") or "", "checkpoint_ns", empty_ok=True),
            None if cid is None else text_id(cid, "checkpoint_id"),
        )

    def config(self, checkpoint_id: str | None = None) -> RunnableConfig:
        """The LangGraph config of this thread and namespace at ``checkpoint_id``."""
        conf: dict[str, Any] = {"thread_id": self.thread_id, "checkpoint_ns": self.ns}
        if checkpoint_id is not None:
            conf["checkpoint_id"] = checkpoint_id
        return {"configurable": conf}


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """Metadata as JSON text for the SQL projection (filters); NULs dropped, others as text."""
    text = orjson.dumps(metadata, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    if "\\u0000" in text:
        text = orjson.dumps(_without_nul(metadata), default=str).decode()
    return text


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, Mapping):
        return {str(k).replace("\x00", ""): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(v) for v in value]
    return value
