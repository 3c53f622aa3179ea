"""``engines/overlap.Overlapped``: a statement sent, other work done in its round trip,
its result read after; on a real PostgreSQL connection of the stack's pool."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import amber
from amber.engines.overlap import Array, Overlapped, _array, text_element

INSERT = """
INSERT INTO overlap_t (k, n, f, at, blob, flag, note)
SELECT %(k)s::text, %(n)s::bigint, %(f)s::float8, %(at)s::timestamptz, %(blob)s::bytea,
    %(flag)s::boolean, %(note)s::text
WHERE NOT EXISTS (SELECT 1 FROM overlap_t WHERE k = %(k)s)
RETURNING n, note
"""


@pytest.fixture
def conn(stack: amber.Stack) -> Iterator[psycopg.Connection[object]]:
    with stack.pg.connection() as c:
        c.execute(
            "CREATE TABLE IF NOT EXISTS overlap_t (k TEXT PRIMARY KEY, n BIGINT, f FLOAT8,"
            " at TIMESTAMPTZ, blob BYTEA, flag BOOLEAN, note TEXT)"
        )
        yield c


class Level(enum.IntEnum):
    HIGH = 2


def _params(**over: object) -> dict[str, object]:
    params: dict[str, object] = {
        "k": uuid.uuid4().hex,
        "n": 2**40,
        "f": 0.1,
        "at": datetime.datetime(2026, 11, 27, 12, 30, tzinfo=datetime.UTC),
        "blob": b"\x00\xff" * 10,
        "flag": True,
        "note": "café",
    }
    return params | over


def test_work_runs_inside_the_round_trip_and_the_row_is_stored_as_sent(
    conn: psycopg.Connection[object],
) -> None:
    stmt = Overlapped("amber_test_overlap", INSERT)
    ran: list[str] = []
    params = _params()
    row = stmt.run(conn, params, lambda: ran.append("during"))
    assert ran == ["during"] and row == (str(2**40).encode(), "café".encode())
    got = conn.execute(
        "SELECT n, f, at, blob, flag, note FROM overlap_t WHERE k = %s", (params["k"],)
    ).fetchone()
    assert got == (2**40, 0.1, params["at"], params["blob"], True, "café")
    assert stmt.run(conn, params, lambda: None) is None  # the WHERE refused it: no row


def test_a_null_parameter_and_a_prepared_statement_dropped_under_it(
    conn: psycopg.Connection[object],
) -> None:
    stmt = Overlapped("amber_test_overlap_again", INSERT)
    assert stmt.run(conn, _params(note=None), lambda: None) == (str(2**40).encode(), None)
    conn.execute("DEALLOCATE ALL")  # as psycopg does after some statements
    calls: list[int] = []
    assert stmt.run(conn, _params(), lambda: calls.append(1)) is not None
    assert calls == [1]  # prepared and sent again, the work done once


def test_bad_input_is_a_psycopg_error_and_leaves_the_connection_usable(
    conn: psycopg.Connection[object],
) -> None:
    stmt = Overlapped("amber_test_overlap_bad", INSERT)
    with pytest.raises(psycopg.DataError, match="cannot send a list"):
        stmt.run(conn, _params(note=["x"]), lambda: None)
    with pytest.raises(psycopg.DataError, match="not valid text"):
        stmt.run(conn, _params(note="\ud800"), lambda: None)
    with pytest.raises(psycopg.DataError, match="NUL"):  # libpq would cut it there
        stmt.run(conn, _params(note="a\x00b"), lambda: None)
    with pytest.raises(psycopg.errors.NumericValueOutOfRange):
        stmt.run(conn, _params(n=2**70), lambda: None)
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_work_that_raises_propagates_after_the_statement_finished(
    conn: psycopg.Connection[object],
) -> None:
    """The statement may have committed by then: the work's error is raised, and the
    connection is ready for the next statement."""
    stmt = Overlapped("amber_test_overlap_raise", INSERT)
    params = _params()

    def boom() -> None:
        raise KeyError("during")

    with pytest.raises(KeyError):
        stmt.run(conn, params, boom)
    assert conn.execute("SELECT count(*) FROM overlap_t WHERE k = %s", (params["k"],)).fetchone()
    assert Overlapped.usable(conn)


def test_a_connection_in_a_transaction_is_not_usable(conn: psycopg.Connection[object]) -> None:
    with conn.transaction():
        assert not Overlapped.usable(conn)
    assert Overlapped.usable(conn)


def test_without_prepared_statements_it_sends_the_statement_whole(
    conn: psycopg.Connection[object],
) -> None:
    """``prepare_threshold=None`` (a pooler that keeps no prepared statements): the
    statement is parsed with each execution, never prepared by name."""
    stmt = Overlapped("amber_test_overlap_unnamed", INSERT)
    conn.prepare_threshold = None
    try:
        assert stmt.run(conn, _params(n=Level.HIGH), lambda: None) == (b"2", "café".encode())
        assert stmt.run(conn, _params(), lambda: None) is not None
        named = conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE name = %s",
            ("amber_test_overlap_unnamed",),
        ).fetchone()
    finally:
        conn.prepare_threshold = 5
    assert named == (0,)


ARRAYS = """
SELECT array_to_json(%(texts)s::text[])::text, array_to_json(%(blobs)s::bytea[])::text,
    array_to_json(%(ints)s::int[])::text
"""


@pytest.mark.parametrize(
    ("texts", "blobs", "ints"),
    [
        (["ch0", "café", 'a "quoted", {braced} \\ name', "", "NULL"], [b"\x00\xff", b""],
         [1, None, -(2**31), 2**31 - 1]),
        ([], [], []),
    ],
)  # fmt: skip
def test_arrays_arrive_element_for_element(
    conn: psycopg.Connection[object],
    texts: list[str],
    blobs: list[bytes],
    ints: list[int | None],
) -> None:
    """Quotes, braces, backslashes, the word NULL, NUL bytes, NULL ints and empty
    arrays: each element as sent, read back by the server as JSON."""
    stmt = Overlapped("amber_test_overlap_arrays", ARRAYS)
    params = {"texts": Array.text(texts), "blobs": Array.bytea(blobs), "ints": Array.int4(ints)}
    joined = Array.joined(texts, [text_element(t) for t in texts])
    assert joined.data == _array("text", [t.encode() for t in texts])  # array_recv's format
    row = stmt.run(conn, params, lambda: None)
    assert row is not None
    assert json.loads(row[0] or b"") == texts
    assert json.loads(row[1] or b"") == ["\\x" + b.hex() for b in blobs]
    assert json.loads(row[2] or b"") == ints


def test_an_array_psycopg_could_not_send_either_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(psycopg.DataError, match="NUL"):
        Array.text(["a\x00b"])
    with pytest.raises(psycopg.DataError, match="NUL"):
        text_element("a\x00b")
    with pytest.raises(psycopg.DataError, match="not valid text"):
        text_element("\ud800")
    with pytest.raises(psycopg.DataError, match="not text"):
        text_element(7)  # type: ignore[arg-type]
    with pytest.raises(psycopg.DataError, match="not valid text"):
        Array.text(["\ud800"])
    with pytest.raises(psycopg.DataError, match="out of range"):
        Array.int4([2**31])


def test_where_it_cannot_overlap_it_runs_as_psycopg_runs_it_and_answers_the_same(
    conn: psycopg.Connection[object],
) -> None:
    """In a transaction the work runs first, told the statement is not in flight, and
    the row comes back as text, as from a statement overlapped."""
    stmt = Overlapped("amber_test_overlap_fallback", INSERT)
    told: list[bool] = []
    params = _params()
    with conn.transaction():
        row = stmt.execute(conn, params, told.append)
    assert told == [False] and row == (str(2**40).encode(), "café".encode())
    assert stmt.execute(conn, params, told.append) is None  # overlapped now: refused, no row
    assert told == [False, True]
