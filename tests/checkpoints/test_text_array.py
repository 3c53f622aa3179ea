"""The step lists a checkpoint row stores go to PostgreSQL as one array literal: whatever
the names hold, PostgreSQL reads back the same list."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amber.schema.sql import text_array

from ..conftest import Engines

NAMES = st.lists(st.text(st.characters(blacklist_characters="\x00", codec="utf-8")), max_size=8)


@pytest.fixture(scope="module")
def pg(engines: Engines) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(engines.database_url, autocommit=True) as conn:
        yield conn


@settings(max_examples=300, deadline=None)
@given(names=NAMES)
def test_postgresql_reads_back_the_same_list(
    pg: psycopg.Connection[tuple[object, ...]], names: list[str]
) -> None:
    row = pg.execute("SELECT %s::text[]", (text_array(names),)).fetchone()
    assert row is not None and row[0] == names


def test_quotes_commas_braces_and_backslashes() -> None:
    assert text_array([]) == "{}"
    assert text_array(["a", "b"]) == '{"a","b"}'
    assert text_array(['x","y', "c\\d"]) == '{"x\\",\\"y","c\\\\d"}'
