"""The documents the persistence module stores, validated by pydantic, and their JSON.

Pure code, no I/O: ``parse`` turns a dict (or a model) into a checked model or
raises amber's ``ValidationError`` naming the first bad field; ``dump`` and
``load`` are the JSON (orjson) stored in Redis. Nothing here can run code when
loaded: no pickle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

import orjson
import pydantic
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from amber import defaults
from amber.errors import InvalidIdentifier, ValidationError
from amber.keys import check_id, check_text

_STRICT = ConfigDict(extra="forbid")
"""Unknown fields are refused. Edits to a model are checked when it is saved, so every
bad value, set at construction or later, is amber's ``ValidationError`` naming it."""


_PLAIN_ID = re.compile(r"[A-Za-z0-9_.@+=-]{1,128}")
"""Ids made only of these characters pass ``check_id``; others are checked by it."""


def _id(kind: str) -> AfterValidator:
    def check(value: str) -> str:
        return value if _PLAIN_ID.fullmatch(value) else check_id(value, kind)

    return AfterValidator(check)


SessionId = Annotated[str, _id("session_id")]
TaskId = Annotated[str, _id("task id")]
ReviewId = Annotated[str, _id("review_id")]
ReviewKind = Annotated[str, _id("kind")]

Decision = Literal["approved", "rejected", "expired"]
"""What became of a review: ``decide`` records the first two."""


MAX_VERSION = 2**53 - 2
"""Highest session version: the save script compares versions as Lua numbers (doubles),
exact only below 2**53, and stores version + 1."""


class Session(BaseModel):
    """An agent session (the seed's GlobalState): its goal, status, planned tasks and version."""

    model_config = _STRICT

    version: int = Field(0, ge=0, le=MAX_VERSION)
    """The version this copy was read at; ``save_session`` stores ``version + 1``.

    Declared first, so the stored JSON starts with ``{"version":N,`` and the save
    script reads it without decoding the document."""
    session_id: SessionId
    goal: str = Field(min_length=1)
    status: str = Field(min_length=1, max_length=defaults.STATUS_MAX_LEN)
    task_queue: list[str] = Field(default_factory=list)
    """The planner's list of task ids, kept in the document; ``next_task`` uses the Redis queue."""

    @field_validator("task_queue")
    @classmethod
    def _task_ids(cls, value: list[str]) -> list[str]:
        if all(map(_PLAIN_ID.fullmatch, value)):  # the common case, without a call per id
            return value
        for i, task_id in enumerate(value):
            try:
                check_id(task_id, "task id")
            except InvalidIdentifier as exc:
                raise ValueError(f"item {i}: {exc}") from None
        return value


class Task(BaseModel):
    """A unit of work for a worker, e.g. one MCP tool call, queued in one session."""

    model_config = _STRICT

    id: TaskId
    type: str = Field(min_length=1, max_length=defaults.STATUS_MAX_LEN)
    mcp_tool: str | None = Field(None, min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)
    timeout: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds a worker may spend on the task; None: no limit."""
    session_id: SessionId | None = None
    """The session whose queue holds the task; ``save_task`` fills it in."""

    @field_validator("parameters")
    @classmethod
    def _json_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _json_object(value, "parameters")


def _json_object(value: dict[str, Any], name: str) -> dict[str, Any]:
    """``value`` if orjson can write it as JSON without loss, else ``ValueError``."""
    try:
        orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError too
        raise ValueError(f"{name} must be JSON: {exc}") from None
    where = _non_finite(value, name)
    if where:
        raise ValueError(f"{name} must be JSON: {where} is not a finite number")
    return value


def _non_finite(value: Any, path: str) -> str | None:
    """Where in ``value`` a NaN or infinity is (JSON has none: orjson would write null)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    items: Any = ()
    if isinstance(value, dict):
        items = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    for where, item in items:
        found = _non_finite(item, where)
        if found:
            return found
    return None


def _default_expiry() -> datetime:
    return datetime.now(UTC) + timedelta(seconds=defaults.REVIEW_TTL)


def _storable(kind: str) -> AfterValidator:
    """Text PostgreSQL can hold (reviews are rows there): no NUL, no lone surrogate."""

    def check(value: str) -> str:
        return check_text(value, kind, defaults.COMMENT_MAX_LEN, allow_empty=True)

    return AfterValidator(check)


DeciderName = Annotated[
    str, Field(min_length=1, max_length=defaults.ID_MAX_LEN), _storable("decided_by")
]
"""Who decided a review: a user name or address, 1-128 characters."""
Comment = Annotated[str, Field(max_length=defaults.COMMENT_MAX_LEN), _storable("comment")]
"""A reviewer's comment, at most 10,000 characters."""


class ReviewItem(BaseModel):
    """A task result waiting for a human decision until ``expires_at`` (its deadline).

    ``decide`` fills in ``decision``, ``decided_by``, ``decided_at`` and ``comment``
    once; a decided review leaves the pending queue.
    """

    model_config = _STRICT

    review_id: ReviewId
    task_id: TaskId
    confidence: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    expires_at: AwareDatetime = Field(default_factory=_default_expiry)
    """When the review stops being pending (timezone required); default: in 24 h."""
    kind: ReviewKind | None = None
    """What is being reviewed (e.g. ``tool_call``), an id of 1-128 safe characters."""
    payload: dict[str, Any] = Field(default_factory=dict)
    """What the reviewer needs to see, as a JSON object."""
    decision: Decision | None = None
    decided_by: DeciderName | None = None
    decided_at: AwareDatetime | None = None
    comment: Comment | None = None

    @field_validator("payload")
    @classmethod
    def _json_payload(cls, value: dict[str, Any]) -> dict[str, Any]:
        _json_object(value, "payload")
        if b"\\u0000" in orjson.dumps(value):  # reviews are rows in PostgreSQL (jsonb)
            raise ValueError("payload holds a NUL character, which PostgreSQL cannot store")
        return value

    def expired(self, now: datetime | None = None) -> bool:
        """True once ``expires_at`` has passed."""
        return self.expires_at <= (now or datetime.now(UTC))

    def expires_at_ms(self) -> int:
        """``expires_at`` as Unix milliseconds (the review queue's score)."""
        return int(self.expires_at.timestamp() * 1000)


class Verdict(BaseModel):
    """The arguments of ``decide``, checked before anything is read."""

    model_config = _STRICT

    decision: Literal["approved", "rejected"]
    by: DeciderName
    comment: Comment | None = None


M = TypeVar("M", bound=BaseModel)

_KIND = {Session: "session", Task: "task", ReviewItem: "review", Verdict: "decision"}


def _invalid(model: type[BaseModel], exc: pydantic.ValidationError, **ids: Any) -> ValidationError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(document)"
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    kind = _KIND.get(model, model.__name__)
    return ValidationError(f"invalid {kind}: {field}: {message}{more}", field=field, **ids)


def parse(model: type[M], value: M | Mapping[str, Any]) -> M:
    """``value`` (a dict or a model, maybe edited since) checked as ``model``.

    Raises ``ValidationError`` naming the first bad field.
    """
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if not isinstance(value, Mapping):
        kind = _KIND.get(model, model.__name__)
        raise ValidationError(
            f"a {kind} must be a dict or {model.__name__}, got {type(value).__name__}",
            field="(document)",
        )
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise _invalid(model, exc) from None


def dump(document: BaseModel) -> bytes:
    """The JSON stored for ``document``, fields in declaration order.

    Raises ``ValidationError`` if it cannot be JSON or is over ``DOCUMENT_MAX_BYTES``.
    """
    kind = _KIND.get(type(document), type(document).__name__)
    try:
        raw = orjson.dumps(document.model_dump())
    except TypeError as exc:  # orjson.JSONEncodeError too
        raise ValidationError(
            f"{kind} cannot be stored as JSON: {exc}", field="(document)"
        ) from None
    if len(raw) > defaults.DOCUMENT_MAX_BYTES:
        raise ValidationError(
            f"{kind} is {len(raw)} bytes as JSON, over the limit of {defaults.DOCUMENT_MAX_BYTES}",
            field="(document)",
        )
    return raw


def load(model: type[M], raw: bytes | str) -> M:
    """A stored document back as ``model``; ``ValidationError`` if it was tampered with."""
    try:
        return model.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError as exc:
        kind = _KIND.get(model, model.__name__)
        raise ValidationError(f"stored {kind} is not JSON: {exc}", field="(document)") from None
    except pydantic.ValidationError as exc:
        raise _invalid(model, exc, stored=True) from None
