"""Real servers for the whole suite.

With ``AMBER_REDIS_URL`` / ``AMBER_DATABASE_URL`` set, the suite uses those servers;
otherwise it starts embedded ones in a temporary data directory. Either way it
works under a unique key prefix and in a database it creates, and removes only
what it created.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("COLUMNS", "220")  # wide rich tables in CLI output under test

import psycopg
import pytest
import redis
from psycopg.conninfo import make_conninfo

import amber
from amber.engines.connect import open_redis
from amber.engines.embedded import ensure_embedded, stop_embedded
from amber.redis_url import parse_redis_url


@dataclass(frozen=True)
class Engines:
    """URLs the suite runs against."""

    redis_url: str
    database_url: str
    admin_url: str
    prefix: str
    data_dir: Path
    embedded: bool


def _drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def on_cluster(redis_url: str | None = None) -> bool:
    """Whether the suite runs on a Redis Cluster (``AMBER_REDIS_URL`` by default)."""
    url = redis_url or os.environ.get("AMBER_REDIS_URL") or ""
    return parse_redis_url(url).kind == "cluster" if url else False


def scan_prefix(client: redis.Redis, prefix: str, derived: bool = False) -> list[bytes]:
    """Every ``<prefix>:*`` key, on every primary of a cluster (SCAN; tests only);
    ``derived``: also those of the prefixes tests make from it (``<prefix>-<name>:*``)."""
    if isinstance(client, redis.RedisCluster):
        scans = [n.redis_connection for n in client.get_primaries()]
    else:
        scans = [client]
    found: list[bytes] = []
    for node in scans:
        assert node is not None
        found += node.scan_iter(match=f"{prefix}[-:]*" if derived else f"{prefix}:*", count=1000)
    return found


def written_behind() -> None:
    """Write now the LangGraph hot copies this process left to be written behind its
    puts: at exit they would land under key prefixes already removed."""
    copies = sys.modules.get("amber.langgraph.copies")
    if copies is not None:
        copies._flush_all()


def delete_prefix(redis_url: str, prefix: str, derived: bool = False) -> None:
    """Delete every ``<prefix>:*`` key, on every primary of a cluster (``derived``: and
    every key of a prefix made from it, ``<prefix>-<name>:*``)."""
    written_behind()
    client = open_redis(redis_url, 5.0)
    try:
        for key in scan_prefix(client, prefix, derived):
            client.delete(key)  # one key per call: keys under a prefix span slots
    finally:
        client.close()


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    redis_url = os.environ.get("AMBER_REDIS_URL")
    admin_url = os.environ.get("AMBER_DATABASE_URL")
    data_dir = tmp_path_factory.mktemp("amber")
    started = not (redis_url and admin_url)
    if started:
        urls = ensure_embedded(data_dir, redis=not redis_url, postgres=not admin_url)
        redis_url = redis_url or urls["redis"]
        admin_url = admin_url or urls["postgres"]
    assert redis_url and admin_url
    run = uuid.uuid4().hex[:10]
    dbname = f"amber_test_{run}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    database_url = make_conninfo(admin_url, dbname=dbname)
    prefix = f"amber-test-{run}"
    saved = {
        k: os.environ.get(k)
        for k in ("AMBER_REDIS_URL", "AMBER_DATABASE_URL", "AMBER_PREFIX", "AMBER_DATA_DIR")
    }
    os.environ.update(
        AMBER_REDIS_URL=redis_url,
        AMBER_DATABASE_URL=database_url,
        AMBER_PREFIX=prefix,
        AMBER_DATA_DIR=str(data_dir),
    )
    try:
        yield Engines(redis_url, database_url, admin_url, prefix, data_dir, started)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        delete_prefix(redis_url, prefix, derived=True)  # and -pgr, -demo, -cli-...
        _drop_database(admin_url, dbname)
        if started:
            stop_embedded(data_dir)


@pytest.fixture(scope="session")
def stack(engines: Engines) -> Iterator[amber.Stack]:
    with amber.connect(engines.redis_url, engines.database_url, prefix=engines.prefix) as s:
        yield s


@pytest.fixture
def uid() -> Callable[[str], str]:
    """Make ids unique to one test: ``uid("agent")`` → ``agent-1a2b3c4d``."""

    def make(name: str = "id") -> str:
        return f"{name}-{uuid.uuid4().hex[:8]}"

    return make
