"""One statement whose round trip other work overlaps: sent, then waited for later.

psycopg's ``execute`` sends a statement and waits for its answer in one call, so any
work the caller has left (building and sending the Redis copies of a checkpoint) comes
before or after the round trip, never inside it. :class:`Overlapped` sends the statement
with libpq directly (``Connection.pgconn``, psycopg's documented way to features it does
not wrap), prepared once per connection (or, where the connection's
``prepare_threshold`` is None, as a pooler in transaction mode needs, parsed with each
execution), and runs the caller's work while PostgreSQL executes and commits it.

It serves statements whose parameters are all cast in the SQL (``%(name)s::type``): each
goes as text, bytes and :class:`Array` as binary, and the server takes the type from the
cast.
"""

from __future__ import annotations

import datetime
import re
import select
import struct
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def _numbered(query: str) -> tuple[bytes, list[str]]:
    """``query`` with its ``%(name)s`` placeholders as ``$n`` (one per name), and the
    names in their numbers' order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, query).encode(), names


_HEADER = struct.Struct("!iiiii")
_EMPTY = struct.Struct("!iii")
_LENGTH = struct.Struct("!i")
_INT4 = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)
_OID = {"text": 25, "bytea": 17, "int4": 23}


@dataclass(frozen=True, slots=True)
class Array:
    """A one-dimensional array parameter of text, bytea or int4, for a placeholder cast
    to ``text[]``, ``bytea[]`` or ``int[]``: sent in PostgreSQL's binary array format,
    each element as it is, where psycopg would adapt the list one element at a time.
    ``items`` are the values, for a statement psycopg runs instead."""

    items: Sequence[str | bytes | int | None]
    data: bytes

    @classmethod
    def text(cls, items: Sequence[str]) -> Array:
        """A ``text[]``; ``psycopg.DataError`` for a NUL or text that is not Unicode."""
        return cls.joined(items, [text_element(item) for item in items])

    @classmethod
    def joined(cls, items: Sequence[str], elements: Sequence[bytes]) -> Array:
        """A ``text[]`` of ``items`` from their elements already in binary form
        (:func:`text_element`): one join, where a value sent in many arrays is encoded
        once."""
        if not elements:
            return cls(items, _EMPTY.pack(0, 0, _OID["text"]))
        return cls(items, _HEADER.pack(1, 0, _OID["text"], len(elements), 1) + b"".join(elements))

    @classmethod
    def bytea(cls, items: Sequence[bytes]) -> Array:
        """A ``bytea[]``."""
        return cls(items, _array("bytea", items))

    @classmethod
    def int4(cls, items: Sequence[int | None]) -> Array:
        """An ``int[]`` (None: NULL)."""
        if any(item is not None and not -(2**31) <= item < 2**31 for item in items):
            raise psycopg.DataError("an int[] parameter is out of range")
        return cls(items, _array("int4", [None if i is None else _INT4.pack(i) for i in items]))


def _array(kind: str, items: Sequence[bytes | None]) -> bytes:
    """PostgreSQL's binary form of a one-dimensional array of ``kind`` (``array_recv``:
    dimensions, a has-NULL flag, the element type, then each element's length and bytes,
    -1 for NULL)."""
    if not items:
        return _EMPTY.pack(0, 0, _OID[kind])  # no dimensions: '{}'
    parts = [b""]
    nulls = 0
    for item in items:
        if item is None:
            parts.append(_NULL)
            nulls = 1
        else:
            parts.append(_LENGTH.pack(len(item)))
            parts.append(item)
    parts[0] = _HEADER.pack(1, nulls, _OID[kind], len(items), 1)
    return b"".join(parts)


def text_element(value: str) -> bytes:
    """``value`` as one element of a binary ``text[]`` (its length, then its UTF-8), for
    :meth:`Array.joined`; ``psycopg.DataError`` for a NUL or text that is not Unicode."""
    if not isinstance(value, str):
        raise psycopg.DataError("a text[] parameter holds a value that is not text")
    try:
        data = _text(value).encode()
    except UnicodeEncodeError as exc:
        raise psycopg.DataError(f"a parameter is not valid text: {exc}") from None
    return _LENGTH.pack(len(data)) + data


def _text(value: str) -> str:
    if "\x00" in value:  # libpq sends text as a C string: it would end there
        raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    return value


def _param(value: object) -> tuple[bytes | None, int]:
    """One parameter as libpq sends it: (bytes, format), 0 text and 1 binary."""
    if value is None:
        return None, 0
    if isinstance(value, bytes):
        return value, 1
    if isinstance(value, Array):
        return value.data, 1
    if isinstance(value, str):
        return _text(value).encode(), 0
    if isinstance(value, bool):
        return (b"t" if value else b"f"), 0
    if isinstance(value, int):
        return int.__repr__(value).encode(), 0  # an IntEnum's value, not its repr
    if isinstance(value, float):
        return float.__repr__(value).encode(), 0
    if isinstance(value, datetime.datetime):
        return value.isoformat().encode(), 0
    raise psycopg.DataError(f"cannot send a {type(value).__name__} as a parameter")


def _raise(result: pq.abc.PGresult) -> None:
    """The psycopg exception of a failed result, raised as psycopg raises it: the
    server's error by its SQLSTATE (with its diagnostics), and one libpq made itself (a
    lost connection: no SQLSTATE) as ``OperationalError``."""
    if result.error_field(pq.DiagnosticField.SQLSTATE):
        raise psycopg.errors.error_from_result(result)
    message = (result.error_message or b"").decode(errors="replace").strip()
    raise psycopg.OperationalError(message or "the connection to PostgreSQL was lost")


_NOT_PREPARED = b"26000"
"""invalid_sql_statement_name: the prepared statement is gone (``DEALLOCATE ALL``)."""
_ALREADY_PREPARED = b"42P05"
"""duplicate_prepared_statement: prepared on this session already."""


class Overlapped:
    """A statement (``%(name)s`` placeholders, every one cast in the SQL) run with other
    work inside its round trip; prepared on each connection the first time it runs there."""

    def __init__(self, name: str, query: str) -> None:
        self.name = name.encode()
        self.source = query
        self.query, self.names = _numbered(query)
        self._prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], bool] = (
            weakref.WeakKeyDictionary()
        )

    @staticmethod
    def usable(conn: psycopg.Connection[Any]) -> bool:
        """Whether ``conn`` can run it: in autocommit, idle, speaking UTF-8."""
        return (
            conn.autocommit
            and conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
            and conn.pgconn.parameter_status(b"client_encoding") == b"UTF8"
        )

    def execute(
        self,
        conn: psycopg.Connection[Any],
        params: Mapping[str, object],
        during: Callable[[bool], object] | None = None,
    ) -> tuple[bytes | None, ...] | None:
        """Run it on ``conn``: as :meth:`run` where ``conn`` is :meth:`usable`, ``during``
        told True (the statement is in flight); elsewhere as psycopg runs any statement,
        its :class:`Array` parameters as their items, ``during`` run first and told False
        (so it should wait on nothing there). Either way, the first row as text (None: no
        row)."""
        if Overlapped.usable(conn):
            return self.run(conn, params, None if during is None else lambda: during(True))
        if during is not None:
            during(False)
        plain = {k: v.items if isinstance(v, Array) else v for k, v in params.items()}
        result = conn.execute(self.source, plain).pgresult
        if result is None or result.ntuples == 0:
            return None
        return tuple(result.get_value(0, i) for i in range(result.nfields))

    def run(
        self,
        conn: psycopg.Connection[Any],
        params: Mapping[str, object],
        during: Callable[[], object] | None = None,
    ) -> tuple[bytes | None, ...] | None:
        """Send the statement on ``conn`` (see :meth:`usable`), run ``during`` while
        PostgreSQL executes and commits it, and return its first row as text (None: no
        row). ``during`` runs once, after the statement went out; by then the statement
        may have committed, so ``during`` is work that need not decide whether it does.
        Bad parameters raise ``psycopg.DataError`` before anything is sent; a statement
        that fails raises its psycopg error, after ``during`` ran."""
        values: list[bytes | None] = []
        formats: list[int] = []
        try:
            for name in self.names:
                param = params[name]  # the common kinds without a call each, else _param's
                if type(param) is Array:
                    values.append(param.data)
                    formats.append(1)
                elif type(param) is str:
                    values.append(_text(param).encode())
                    formats.append(0)
                elif type(param) is bytes or param is None:
                    values.append(param)
                    formats.append(1)
                else:
                    value, fmt = _param(param)
                    values.append(value)
                    formats.append(fmt)
        except UnicodeEncodeError as exc:
            raise psycopg.DataError(f"a parameter is not valid text: {exc}") from None
        pgconn = conn.pgconn
        named = conn.prepare_threshold is not None  # None: the pool may not keep them
        if named and conn not in self._prepared:
            self._prepare(conn)
        self._send(pgconn, values, formats, named)
        try:
            if during is not None:
                during()
        except BaseException:
            self._result(pgconn)  # the connection is left ready for its next statement
            raise
        result = self._result(pgconn)
        if result.status == pq.ExecStatus.FATAL_ERROR and (
            result.error_field(pq.DiagnosticField.SQLSTATE) == _NOT_PREPARED
        ):  # refused before it ran: prepare it again and send it once more
            self._prepare(conn)
            self._send(pgconn, values, formats, named)
            result = self._result(pgconn)
        if result.status != pq.ExecStatus.TUPLES_OK:
            _raise(result)
        if result.ntuples == 0:
            return None
        return tuple(result.get_value(0, i) for i in range(result.nfields))

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        result = conn.pgconn.prepare(self.name, self.query)
        code = result.error_field(pq.DiagnosticField.SQLSTATE)
        if result.status == pq.ExecStatus.FATAL_ERROR and code != _ALREADY_PREPARED:
            _raise(result)
        self._prepared[conn] = True

    def _send(
        self, pgconn: pq.abc.PGconn, values: list[bytes | None], formats: list[int], named: bool
    ) -> None:
        """Send it (prepared, or ``named`` False: parsed with this execution), flushing as
        libpq asks: waiting to write, and taking in what the server sends meanwhile."""
        if named:
            pgconn.send_query_prepared(self.name, values, param_formats=formats)
        else:
            pgconn.send_query_params(self.query, values, param_formats=formats)
        while pgconn.flush():
            if wait_socket(pgconn.socket, write=True):
                pgconn.consume_input()

    @staticmethod
    def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
        """The statement's result, once every result of it has arrived (the first
        failure's when there are several)."""
        first: pq.abc.PGresult | None = None
        while True:
            pgconn.consume_input()
            while pgconn.is_busy():
                wait_socket(pgconn.socket)
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                if first is None:
                    raise psycopg.OperationalError("PostgreSQL sent no result")
                return first
            if first is None or (
                result.status == pq.ExecStatus.FATAL_ERROR
                and first.status != pq.ExecStatus.FATAL_ERROR
            ):
                first = result


def wait_socket(fd: int, write: bool = False, timeout: float | None = None) -> bool:
    """Block until ``fd`` is ready to read (or, with ``write``, to read or write), or
    ``timeout`` seconds pass (None: no limit; 0: just look); whether it is ready to read
    (or hung up)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | (select.POLLOUT if write else 0))
        wait_ms = None if timeout is None else int(timeout * 1000)
        return any(ev & (select.POLLIN | select.POLLHUP | select.POLLERR)
                   for _, ev in poller.poll(wait_ms))  # fmt: skip
    readable, _, _ = select.select([fd], [fd] if write else [], [], timeout)
    return bool(readable)
