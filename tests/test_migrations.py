"""Schema migrations: once each, atomically, safe under concurrency."""

from __future__ import annotations

import threading
import uuid

import pytest
from psycopg_pool import ConnectionPool

from amber import MigrationError
from amber.schema.migrations import MIGRATIONS, migrate, schema_version

from .conftest import Engines


@pytest.fixture
def pool(engines: Engines) -> ConnectionPool:
    with ConnectionPool(
        engines.database_url, min_size=1, max_size=8, kwargs={"autocommit": True}
    ) as p:
        yield p


def _steps(tag: str) -> list[str]:
    return [
        f"CREATE TABLE m_{tag}_a (id INT)",
        f"INSERT INTO m_{tag}_a VALUES (1)",
        f"CREATE TABLE m_{tag}_b (id INT)",
    ]


def test_amber_schema_is_applied(stack: object, pool: ConnectionPool) -> None:
    assert schema_version(pool) == len(MIGRATIONS)
    assert migrate(pool) == []  # idempotent


def test_concurrent_migrations_apply_each_step_once(pool: ConnectionPool) -> None:
    tag = uuid.uuid4().hex[:8]
    table = f"mig_{tag}"
    results: list[list[int]] = []
    threads = [
        threading.Thread(target=lambda: results.append(migrate(pool, _steps(tag), table, 7)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(v for r in results for v in r) == [1, 2, 3]
    with pool.connection() as conn:
        assert conn.execute(f"SELECT count(*) FROM m_{tag}_a").fetchone() == (1,)
    assert schema_version(pool, table) == 3


def test_failed_migration_rolls_back_and_keeps_version(pool: ConnectionPool) -> None:
    tag = uuid.uuid4().hex[:8]
    table = f"mig_{tag}"
    steps = [f"CREATE TABLE f_{tag} (id INT)", f"CREATE TABLE g_{tag} (id INT); SELECT 1/0"]
    with pytest.raises(MigrationError, match="migration 2 failed"):
        migrate(pool, steps, table, 8)
    assert schema_version(pool, table) == 1
    with pool.connection() as conn:
        assert conn.execute("SELECT to_regclass(%s)", (f"g_{tag}",)).fetchone() == (None,)


def test_newer_schema_is_refused(pool: ConnectionPool) -> None:
    tag = uuid.uuid4().hex[:8]
    table = f"mig_{tag}"
    migrate(pool, _steps(tag), table, 9)
    with pytest.raises(MigrationError, match="newer than this amber"):
        migrate(pool, _steps(tag)[:1], table, 9)
