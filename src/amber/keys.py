"""Input validation (identifiers, text, numbers) and every Redis key amber writes.

Each ``check_*`` returns its value or raises an ``AmberError`` whose ``field``
names what was refused: ``InvalidIdentifier`` for ids and key names,
``InvalidValue`` for other values. The limits are ``amber.defaults``' ``*_MAX*``.

All keys of one agent carry the Redis Cluster hash tag ``{agent_id}``, so they
share a slot and one MULTI/EXEC or Lua script can read or write them together.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

from amber import defaults
from amber.errors import InvalidIdentifier, InvalidValue

T = TypeVar("T")

_GLOB_OR_BRACE = frozenset("*?[]{}\\")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _utf8(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (it does not if it holds a lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_PASSED: dict[tuple[str, int, bool], None] = {}
"""Names that passed :func:`_check` lately (with their bound): the same ids are checked
at every save, and a string cannot change."""

_PASSED_MAX = 4096


def _check(value: object, kind: str, max_len: int, allow_colon: bool) -> str:
    if type(value) is str and (value, max_len, allow_colon) in _PASSED:
        return value
    _check_new(value, kind, max_len, allow_colon)
    assert isinstance(value, str)
    if type(value) is str:  # never a subclass: its own __eq__ could match other names
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()
        _PASSED[(value, max_len, allow_colon)] = None
    return value


def _check_new(value: object, kind: str, max_len: int, allow_colon: bool) -> None:
    def bad(why: str) -> InvalidIdentifier:
        return InvalidIdentifier(f"{kind} {why}", field=kind, value=value)

    if not isinstance(value, str):
        raise bad(f"must be a string, got {type(value).__name__}")
    if not value:
        raise bad("is empty")
    if len(value) > max_len:
        raise bad(f"is longer than {max_len} characters")
    if _CONTROL.search(value):
        raise bad("contains a control character")
    if not _utf8(value):
        raise bad("is not valid UTF-8 (it holds a lone surrogate)")
    glob = sorted(set(value) & _GLOB_OR_BRACE)
    if glob:
        raise bad(
            f"contains {''.join(glob)!r}: glob characters, braces and backslashes are not allowed"
        )
    if not allow_colon and ":" in value:
        raise bad("contains ':', which separates key parts")
    if value != value.strip():
        raise bad("has leading or trailing whitespace")


def check_id(value: object, kind: str = "identifier") -> str:
    """Return ``value`` if it is a safe id (agent_id, agent_type, ...), else raise.

    Raises ``InvalidIdentifier`` naming ``kind``: not a string, empty, longer than
    ``ID_MAX_LEN``, a control character, a lone surrogate, a glob character, brace,
    backslash or colon, or leading or trailing whitespace.
    """
    return _check(value, kind, defaults.ID_MAX_LEN, allow_colon=False)


def check_key(value: object) -> str:
    """Return ``value`` if it is a safe L1 key name (colons allowed), else raise."""
    return _check(value, "key name", defaults.KEY_MAX_LEN, allow_colon=True)


_BAD_IN_JOINED_KEYS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f*?\[\]{}\\]")
"""In key names joined by newlines: a character no name may hold."""

_EDGE_SPACE_IN_JOINED_KEYS = re.compile(r"^\s|\s$", re.M)
"""In key names joined by newlines: a name that starts or ends with whitespace."""


def _clean_joined(joined: str) -> bool:
    """Whether key names joined by newlines hold no refused character, no lone surrogate
    and no name with whitespace at either end. ASCII names without a space skip the
    whitespace scan (a tenth of the time): every other ASCII whitespace character is a
    control character, refused by the first scan."""
    if _BAD_IN_JOINED_KEYS.search(joined):
        return False
    if joined.isascii():
        return " " not in joined or not _EDGE_SPACE_IN_JOINED_KEYS.search(joined)
    return _utf8(joined) and not _EDGE_SPACE_IN_JOINED_KEYS.search(joined)


def check_keys(values: list[str]) -> list[str]:
    """``[check_key(v) for v in values]`` in one pass over all of them (a snapshot of a
    big memory checks thousands of names); raises as :func:`check_key` does."""
    try:
        joined = "\n".join(values)
    except TypeError:
        joined = None
    if (
        joined is not None
        and values
        and joined.count("\n") == len(values) - 1  # no name holds a newline
        and min(map(len, values)) > 0
        and max(map(len, values)) <= defaults.KEY_MAX_LEN
        and _clean_joined(joined)
    ):
        return values
    return [check_key(v) for v in values]


def check_uuid(value: object, kind: str = "analysis_id") -> str:
    """Return the canonical text of a UUID given as UUID or string, else raise."""
    if type(value) is str and value in _CANONICAL_UUIDS:
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        text = str(uuid.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        raise InvalidIdentifier(f"{kind} is not a UUID", field=kind, value=value) from None
    if len(_CANONICAL_UUIDS) >= _PASSED_MAX:
        _CANONICAL_UUIDS.clear()
    _CANONICAL_UUIDS[text] = None
    return text


_CANONICAL_UUIDS: dict[str, None] = {}
"""UUIDs lately returned by :func:`check_uuid`, in their canonical text."""


def key_part(value: object, kind: str) -> str:
    """``value`` as one part of a Redis key: itself when it is a safe id, else ``h:`` and
    the first 32 hex digits of its SHA-256 (a safe id never holds a colon, so the two
    forms never meet). For names amber does not choose, such as LangGraph thread ids."""
    if not isinstance(value, str):
        raise InvalidIdentifier(f"{kind} must be a string, got {type(value).__name__}", value=value)
    try:
        return check_id(value, kind)
    except InvalidIdentifier:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
        return f"h:{digest[:32]}"


def check_prefix(value: object) -> str:
    """Return ``value`` if it is usable as the key prefix, else raise."""
    return check_id(value, "prefix")


def check_ticker(value: object, field: str = "stock_ticker") -> str:
    """Return ``value`` if it is a usable stock ticker, else raise ``InvalidIdentifier``.

    The rules of ``check_id``, at most ``TICKER_MAX_LEN`` characters.
    """
    return _check(value, field, defaults.TICKER_MAX_LEN, allow_colon=False)


def check_text(
    value: object, field: str, max_len: int, *, allow_empty: bool = False, **context: Any
) -> str:
    """Return ``value`` if it is storable text, else raise ``InvalidValue`` naming ``field``.

    Storable: a ``str`` of at most ``max_len`` characters, without NUL (PostgreSQL
    text cannot hold it) and without lone surrogates (it must encode as UTF-8);
    empty only if ``allow_empty``. ``context`` (e.g. ``agent_id=...``) goes on the error.
    """

    def bad(why: str) -> InvalidValue:
        return InvalidValue(f"{field} {why}", field=field, value=value, **context)

    if not isinstance(value, str):
        raise bad(f"must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise bad("is empty")
    if len(value) > max_len:
        raise bad(f"is longer than {max_len} characters")
    if "\x00" in value:
        raise bad("contains a NUL character")
    if not _utf8(value):
        raise bad("is not valid UTF-8 (it holds a lone surrogate)")
    return value


def check_utf8(value: T, field: str, **context: Any) -> T:
    """Return ``value``; a ``str`` that does not encode as UTF-8 raises ``InvalidValue``.

    For values that may hold anything else (NUL included), such as working-memory
    values: only a lone surrogate is refused, naming ``field``; non-strings pass.
    """
    if isinstance(value, str) and not _utf8(value):
        raise InvalidValue(
            f"{field} is not valid UTF-8 (it holds a lone surrogate)",
            field=field,
            value=value,
            **context,
        )
    return value


def check_version(value: object, field: str = "agent_version") -> str:
    """Return ``value`` if it is a usable agent version, else raise ``InvalidValue``.

    Text of at most ``VERSION_MAX_LEN`` characters, without control characters or
    leading or trailing whitespace (``"1.0"``, ``"2.1.3-beta"``).
    """
    text = check_text(value, field, defaults.VERSION_MAX_LEN)
    if _CONTROL.search(text):
        raise InvalidValue(f"{field} contains a control character", field=field, value=text)
    if text != text.strip():
        raise InvalidValue(f"{field} has leading or trailing whitespace", field=field, value=text)
    return text


def check_reason(value: object, field: str = "reason") -> str:
    """Return ``value`` if it is a usable pause reason or name of who acted, else raise.

    Text of at most ``REASON_MAX_LEN`` characters (``check_text``); ``InvalidValue``
    names ``field`` (``"reason"``, ``"by"``).
    """
    return check_text(value, field, defaults.REASON_MAX_LEN)


def check_int(value: object, field: str, lo: int, hi: int) -> int:
    """Return ``value`` if it is an ``int`` in ``[lo, hi]``, else raise ``InvalidValue``.

    ``bool`` is refused (``True`` is not a count), and so are floats, even whole ones.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(
            f"{field} must be an integer, got {type(value).__name__}", field=field, value=value
        )
    if not lo <= value <= hi:
        raise InvalidValue(
            f"{field} must be between {lo} and {hi}, got {value}", field=field, value=value
        )
    return value


def check_seq(value: object, field: str = "seq") -> int:
    """Return ``value`` if it is a usable sequence number (0 to ``SEQ_MAX``), else raise."""
    return check_int(value, field, 0, defaults.SEQ_MAX)


@dataclass(frozen=True)
class Keys:
    """Builds every Redis key for one prefix. Arguments are validated here."""

    prefix: str

    def __post_init__(self) -> None:
        check_prefix(self.prefix)

    # -- L1 working memory (DD-016) ------------------------------------------------
    def l1_base(self, agent_id: str) -> str:
        """Common start of an agent's working-memory keys."""
        return f"{self.prefix}:L1:{{{check_id(agent_id, 'agent_id')}}}:working:"

    def l1(self, agent_id: str, key: str) -> str:
        """One working-memory key: ``<prefix>:L1:{agent}:working:<key>``."""
        return self.l1_base(agent_id) + check_key(key)

    def l1_index(self, agent_id: str) -> str:
        """Hash of the agent's L1 key names to their types."""
        return f"{self.prefix}:L1:{{{check_id(agent_id, 'agent_id')}}}:index"

    def l1_seq(self, agent_id: str) -> str:
        """Counter bumped by every L1 mutation of the agent."""
        return f"{self.prefix}:L1:{{{check_id(agent_id, 'agent_id')}}}:seq"

    def l1_epoch(self, agent_id: str) -> str:
        """Which incarnation of the agent's memory Redis holds (see ``memory/scripts.py``)."""
        return f"{self.prefix}:L1:{{{check_id(agent_id, 'agent_id')}}}:epoch"

    def l1_fence(self, agent_id: str) -> str:
        """The fencing token of the newest run that took the agent's memory over: a write
        carrying a lower token is refused (see ``memory/scripts.py``)."""
        return f"{self.prefix}:L1:{{{check_id(agent_id, 'agent_id')}}}:fence"

    def l1_changes(self, agent_id: str) -> str:
        """Sorted set of the agent's key names by the sequence of their last write or delete."""
        return f"{self.prefix}:L1:{{{check_id(agent_id, 'agent_id')}}}:changes"

    def l1_snapshot(self, agent_id: str) -> str:
        """Latest snapshot of the agent's L1 (Redis secondary)."""
        return f"{self.prefix}:l1_snapshot:{{{check_id(agent_id, 'agent_id')}}}"

    def l1_snapshot_meta(self, agent_id: str) -> str:
        """Meta of the latest snapshot: timestamp, hash, checkpoint id, key count, sequence."""
        return f"{self.prefix}:l1_snapshot_meta:{{{check_id(agent_id, 'agent_id')}}}"

    # -- checkpoints (DD-011) -------------------------------------------------------
    def checkpoint(self, agent_id: str) -> str:
        """Redis backup of an agent's latest checkpoint, in the agent's slot."""
        return f"{self.prefix}:checkpoint:{{{check_id(agent_id, 'agent_id')}}}"

    # -- LangGraph (amber.langgraph) --------------------------------------------------
    def lg_heads(self, thread_id: str) -> str:
        """Hash of one LangGraph thread's hot checkpoint copies, two fields per namespace:
        ``<prefix>:lg:{<thread>}:heads`` (the thread id itself, or ``h:<digest>``)."""
        return f"{self.prefix}:lg:{{{key_part(thread_id, 'thread_id')}}}:heads"

    def lg_store_item(self, namespace: tuple[str, ...], key: str) -> str:
        """Cached copy of one AmberStore item, in its namespace's slot:
        ``<prefix>:lgs:{<namespace joined by .>}:<key>`` (each part itself, or ``h:<digest>``)."""
        if not isinstance(namespace, tuple):
            raise InvalidIdentifier("namespace must be a tuple of strings", value=namespace)
        ns = key_part(".".join(namespace), "namespace")
        return f"{self.prefix}:lgs:{{{ns}}}:{key_part(key, 'key')}"

    # -- maintenance --------------------------------------------------------------------
    def all_keys_pattern(self) -> str:
        """SCAN pattern matching every key under this prefix (repair and cleanup only)."""
        return f"{self.prefix}:*"

    # -- persistence (sessions and tasks) ---------------------------------------------
    # Everything of one session carries the hash tag {session_id}: each script of
    # amber.persistence touches one slot.
    def session(self, session_id: str) -> str:
        """One session document (JSON): ``<prefix>:session:{<session_id>}``."""
        return f"{self.prefix}:session:{{{check_id(session_id, 'session_id')}}}"

    def task_queue(self, session_id: str) -> str:
        """List of a session's queued task ids: ``<prefix>:task_queue:{<session_id>}``."""
        return f"{self.prefix}:task_queue:{{{check_id(session_id, 'session_id')}}}"

    def tasks(self, session_id: str) -> str:
        """Hash of every task saved into a session, task id to JSON, taken ones too:
        ``<prefix>:tasks:{<session_id>}``."""
        return f"{self.prefix}:tasks:{{{check_id(session_id, 'session_id')}}}"

    def task_expiry(self, session_id: str) -> str:
        """Sorted set of a session's task ids scored by when each task expires (ms):
        ``<prefix>:task_expiry:{<session_id>}``."""
        return f"{self.prefix}:task_expiry:{{{check_id(session_id, 'session_id')}}}"

    def task_session(self, task_id: str) -> str:
        """Which session holds a task, for reading it by id alone:
        ``<prefix>:task_session:<task_id>``."""
        return f"{self.prefix}:task_session:{check_id(task_id, 'task_id')}"

    def session_index(self) -> str:
        """Sorted set of session ids, scored by when each session expires (ms), at the latest."""
        return f"{self.prefix}:session_index"


def call_key(provider: str, endpoint: str, params: dict[str, Any]) -> str:
    """Canonical name of one external call: ``provider:endpoint:k=v,...`` (params sorted)."""
    args = ",".join(f"{k}={params[k]}" for k in sorted(params))
    return f"{provider}:{endpoint}:{args}"


def runner_id() -> str:
    """A new id for one run of an analysis: ``host:pid:token``."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
