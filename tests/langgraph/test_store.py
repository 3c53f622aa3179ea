"""The store suite against AmberStore, LangGraph's InMemoryStore (the reference) and
PostgresStore (in a database of its own)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import PostgresStore
from psycopg.conninfo import make_conninfo

import amber
from amber.langgraph import AmberStore

from ..conftest import Engines
from .store_suite import *  # noqa: F403
from .store_suite import StoreUnderTest

STORES = ["AmberStore", "InMemoryStore", "PostgresStore"]


@pytest.fixture(scope="module")
def postgres_store(engines: Engines) -> Iterator[PostgresStore]:
    """LangGraph's PostgresStore on the suite's PostgreSQL, in a database of its own."""
    import psycopg

    name = f"amber_test_pgstore_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(engines.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        with PostgresStore.from_conn_string(make_conninfo(engines.admin_url, dbname=name)) as s:
            s.setup()
            yield s
    finally:
        with psycopg.connect(engines.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=STORES)
def store_under_test(
    request: pytest.FixtureRequest, stack: amber.Stack, postgres_store: PostgresStore
) -> StoreUnderTest:
    if request.param == "AmberStore":
        return StoreUnderTest("AmberStore", AmberStore(stack))
    if request.param == "InMemoryStore":
        return StoreUnderTest("InMemoryStore", InMemoryStore())
    return StoreUnderTest("PostgresStore", postgres_store)
