"""Connecting to Redis and PostgreSQL: clients that answer, or ``StoreUnavailable``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import psycopg
import redis
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout

from amber.errors import StoreUnavailable


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_redis(url: str, timeout: float) -> redis.Redis:
    """A redis-py client for ``url`` that has answered PING, else ``StoreUnavailable``."""
    try:
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout,
            socket_timeout=max(timeout, 10.0),
            health_check_interval=30,
        )
        client.ping()
    except (redis.RedisError, OSError, ValueError) as exc:
        raise StoreUnavailable(
            f"Redis did not answer within {timeout:g}s: {exc}", url=redact(url)
        ) from None
    return client


class AmberPool(ConnectionPool):
    """A psycopg pool whose connection failures surface as ``StoreUnavailable``."""

    def __init__(self, conninfo: str, **kwargs: Any) -> None:
        self.safe_url = redact(conninfo)
        super().__init__(conninfo, **kwargs)

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; a lost or unreachable server is ``StoreUnavailable``."""
        try:
            with super().connection(timeout) as conn:
                yield conn
        except PoolTimeout:
            raise StoreUnavailable(
                "PostgreSQL: no connection could be had in time", url=self.safe_url
            ) from None
        except psycopg.OperationalError as exc:
            with contextlib.suppress(Exception):
                self.check()  # drop the other idle connections to the lost server too
            raise StoreUnavailable(
                f"PostgreSQL connection failed: {exc}".strip(), url=self.safe_url
            ) from None


def _configure(conn: psycopg.Connection[Any]) -> None:
    set_json_loads(orjson.loads, conn)
    set_json_dumps(orjson.dumps, conn)


def open_pg(url: str, timeout: float, max_size: int) -> ConnectionPool:
    """A psycopg pool for ``url`` with one connection made, else ``StoreUnavailable``."""
    try:
        psycopg.connect(url, connect_timeout=max(1, round(timeout))).close()
    except (psycopg.Error, ValueError) as exc:
        raise StoreUnavailable(
            f"PostgreSQL did not answer within {timeout:g}s: {exc}".strip(), url=redact(url)
        ) from None
    pool = AmberPool(
        url,
        configure=_configure,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": max(1, round(timeout))},
        timeout=timeout,
        open=False,
        name="amber",
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except PoolTimeout:
        pool.close()
        raise StoreUnavailable("PostgreSQL pool could not connect", url=redact(url)) from None
    return pool
