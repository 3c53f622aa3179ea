"""Connecting to Redis and PostgreSQL: clients that answer, or ``StoreUnavailable``.

Two timeouts: ``timeout`` (``AMBER_CONNECT_TIMEOUT``, 1 s) bounds reaching a
server and its first answer, so a dead URL fails in about that time;
``command_timeout`` (``AMBER_COMMAND_TIMEOUT``, 30 s) bounds each Redis reply
afterwards, so a long Lua script is not cut off. libpq will not time a
connection out in under 2 s, so amber first opens the socket itself and waits
for PostgreSQL to answer one protocol message within ``timeout``.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import orjson
import psycopg
import redis
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode
from redis.retry import Retry
from redis.sentinel import Sentinel

from amber import defaults
from amber.engines.overlap import wait_socket
from amber.engines.retry import Policy, RetryingCluster, RetryingRedis
from amber.errors import ConfigError, StoreUnavailable
from amber.redis_url import parse_redis_url


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class Flavor:
    """The classes of one redis-py API (sync or asyncio) that a client is made of."""

    redis: Any
    cluster: Any
    node: Any
    sentinel: Any
    retry: Any
    script: Any = None
    """How that API registers a Lua script (for the modules that keep their own)."""


SYNC = Flavor(RetryingRedis, RetryingCluster, ClusterNode, Sentinel, Retry)
"""amber's own sync clients: redis-py's, under a retry ``Policy``."""


def redis_client(
    flavor: Flavor,
    url: str,
    timeout: float,
    command_timeout: float,
    attempts: int = 0,
    pooled: bool = False,
) -> Any:
    """An unprobed client of ``flavor`` for ``url``: one server, a Redis Cluster or a
    Sentinel-managed primary (``amber.redis_url``). The one place a Redis client is made:
    ``timeout`` bounds a connect, ``command_timeout`` a reply, ``attempts`` redis-py's
    own retries; ``pooled`` lifts redis-py's connection cap (a worker's many threads)."""
    target = parse_redis_url(url)
    common: dict[str, Any] = {
        "socket_connect_timeout": timeout,
        "socket_timeout": command_timeout,
        "retry": flavor.retry(NoBackoff(), attempts),
    }
    pool = {"max_connections": defaults.REDIS_MAX_CONNECTIONS} if pooled else {}
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.kind == "single":
        health = {"health_check_interval": 30} if pooled else {}
        return flavor.redis.from_url(url, **health, **pool, **common)
    if target.kind == "cluster":
        nodes = [flavor.node(host, port) for host, port in target.nodes]
        return flavor.cluster(startup_nodes=nodes, ssl=target.tls, **auth, **common)
    sentinel = flavor.sentinel(
        list(target.nodes),
        sentinel_kwargs={"socket_connect_timeout": timeout, "socket_timeout": timeout},
        ssl=target.tls,
    )
    primary = sentinel.master_for(
        target.service, redis_class=flavor.redis, db=target.db, **auth, **pool, **common
    )
    primary.sentinels = list(sentinel.sentinels)
    return primary


def _redis_client(
    url: str, timeout: float, command_timeout: float, policy: Policy | None
) -> redis.Redis:
    """amber's sync client for ``url``: with a ``policy`` it retries under it, else never
    (a probe)."""
    client: RetryingRedis | RetryingCluster = redis_client(
        SYNC, url, timeout, command_timeout, pooled=True
    )
    client.policy = policy or Policy(0)
    # amber calls only what both clients offer, and keeps every MULTI/EXEC in one slot
    return cast(redis.Redis, client)


def open_redis(
    url: str,
    timeout: float,
    command_timeout: float = defaults.COMMAND_TIMEOUT,
    retry_seconds: float = defaults.REDIS_RETRY_SECONDS,
) -> redis.Redis:
    """A redis-py client for ``url`` that has answered PING, else ``StoreUnavailable``.

    ``url`` is one server, ``redis+cluster://`` or ``redis+sentinel://`` (see
    ``amber.redis_url``). The PING is made once, without retries, and must be
    answered within ``timeout``; the client's own replies may then take up to
    ``command_timeout``, and transient failures are retried for ``retry_seconds``
    as ``amber.engines.retry`` allows. The cluster client is returned typed as
    ``redis.Redis``: amber calls only what both offer.
    """
    try:
        target = parse_redis_url(url)
    except ValueError as exc:
        raise ConfigError(
            f"invalid Redis URL {redact(url)!r}: {exc}", setting="redis_url"
        ) from None
    try:
        probe = _redis_client(url, timeout, timeout, None)
        try:
            probe.ping()
        finally:
            probe.close()
        client = _redis_client(url, timeout, command_timeout, Policy(retry_seconds))
    except (redis.RedisError, OSError, ValueError) as exc:
        raise StoreUnavailable(
            f"Redis did not answer within {timeout:g}s ({target.kind}): {exc}", url=redact(url)
        ) from None
    return client


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (keys of one command share a slot)."""
    return isinstance(client, redis.RedisCluster)


def _ended(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server has ended ``conn`` while it sat idle in the pool (its
    ``idle_session_timeout``, a restart, ``pg_terminate_backend``, a proxy closing idle
    connections): then it has sent an error and closed, so the idle socket reads. A
    live idle connection has nothing to read (amber listens for no notifications). One
    poll, no round trip."""
    pgconn = conn.pgconn
    return pgconn.status != pq.ConnStatus.OK or wait_socket(pgconn.socket, timeout=0)


def _in_transaction(conn: psycopg.Connection[Any]) -> bool:
    return conn.pgconn.transaction_status != pq.TransactionStatus.IDLE


class AmberPool(ConnectionPool):
    """A psycopg pool whose connection failures surface as ``StoreUnavailable``, and
    which does not hand out a connection the server ended while it sat idle."""

    def __init__(self, conninfo: str, probe_timeout: float = 1.0, **kwargs: Any) -> None:
        self.safe_url = redact(conninfo)
        self.url = conninfo
        self.probe_timeout = probe_timeout
        super().__init__(conninfo, **kwargs)

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        """A pooled connection the server has not ended (see :func:`_ended`): one it has
        ended is dropped (the pool opens another) and the next taken, so the first call
        after an idle timeout or a restart does not fail. On finding one, the server is
        asked once whether it answers (within ``probe_timeout``, per host): if not,
        ``OperationalError`` then, as the ended connection would have failed, instead of
        waiting for a connection that cannot be made. ``PoolTimeout`` once ``timeout``
        (the pool's by default) has passed in all."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        conn = super().getconn(timeout)
        probed = False
        while self._dropped(conn):
            if not probed:
                probed = True
                try:
                    _probe_pg(self.url, self.probe_timeout)
                except StoreUnavailable as exc:
                    raise psycopg.OperationalError(str(exc)) from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolTimeout("no connection the server had not ended, in time")
            conn = super().getconn(left)
        return conn

    def _dropped(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the server ended ``conn``; if so it is given back closed (the pool
        discards it). Given back as well if the check itself is interrupted."""
        try:
            ended = _ended(conn)
        except BaseException:
            self.putconn(conn)
            raise
        if ended:
            conn.pgconn.finish()
            self.putconn(conn)
        return ended

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; a lost or unreachable server is ``StoreUnavailable``.
        A transaction the block leaves open is committed, or rolled back if it raised,
        as psycopg's pool does. The connection is taken and given back with ``getconn``
        and ``putconn``, and its own context manager entered only for such a
        transaction: in autocommit, with nothing open, its commit would do nothing at
        the cost of a lock and a generator (7 of the 22 us a connection cost)."""
        try:
            conn = self.getconn(timeout)
            try:
                try:
                    yield conn
                except BaseException as exc:
                    if _in_transaction(conn):
                        conn.__exit__(type(exc), exc, exc.__traceback__)
                    raise
                if _in_transaction(conn):
                    conn.__exit__(None, None, None)
            finally:
                self.putconn(conn)
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


_SSL_REQUEST = struct.pack("!ii", 8, 80877103)
"""PostgreSQL's SSLRequest message: every server answers it with one byte, 'S' or 'N'."""


def _libpq_timeout(timeout: float) -> int:
    """The ``connect_timeout`` libpq is given: whole seconds, at least its floor of 2."""
    return max(2, math.ceil(timeout))


def _pg_endpoints(url: str) -> list[str | tuple[str, int]] | None:
    """Where libpq would connect for ``url``: unix socket paths and (host, port) pairs.

    None when amber cannot tell (no host: libpq's compiled-in socket directory).
    """
    params = conninfo_to_dict(url)
    hosts = str(params.get("hostaddr") or params.get("host") or os.environ.get("PGHOST") or "")
    ports = str(params.get("port") or os.environ.get("PGPORT") or "5432").split(",")
    names = hosts.split(",")
    if not all(names) or len(ports) not in (1, len(names)):
        return None
    if any(name.startswith("@") for name in names):
        return None  # an abstract unix socket: left to libpq
    found: list[str | tuple[str, int]] = []
    for i, name in enumerate(names):
        port = ports[0] if len(ports) == 1 else ports[i]
        if not port.isdigit():
            return None
        if name.startswith("/"):
            found.append(f"{name}/.s.PGSQL.{port}")
        else:
            found.append((name, int(port)))
    return found


def _pg_answers(where: str | tuple[str, int], timeout: float) -> str | None:
    """None if a PostgreSQL server at ``where`` answers an SSLRequest within ``timeout``,
    else why not."""
    deadline = time.monotonic() + timeout
    try:
        if isinstance(where, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(where)
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.create_connection(where, timeout=timeout)
        with sock:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(_SSL_REQUEST)
            sock.recv(1)  # 'S', 'N', or an error message or EOF: the server is there
    except TimeoutError:
        return f"{where}: no answer within {timeout:g}s"
    except OSError as exc:
        return f"{where}: {exc.strerror or exc}"
    return None


def _probe_pg(url: str, timeout: float) -> None:
    """Raise ``StoreUnavailable`` if no server of ``url`` answers within ``timeout``."""
    endpoints = _pg_endpoints(url)
    if endpoints is None:
        return  # libpq finds the server itself, under its own timeout
    problems = []
    for where in endpoints:
        problem = _pg_answers(where, timeout)
        if problem is None:
            return
        problems.append(problem)
    raise StoreUnavailable(
        f"PostgreSQL did not answer within {timeout:g}s: {'; '.join(problems)}",
        url=redact(url),
    )


def open_pg(
    url: str,
    timeout: float,
    max_size: int,
    command_timeout: float = defaults.COMMAND_TIMEOUT,
    reconnect_seconds: float = defaults.PG_RECONNECT_SECONDS,
) -> ConnectionPool:
    """A psycopg pool for ``url`` with one connection made, else ``StoreUnavailable``.

    A server that is not there fails within ``timeout``; one that is there has
    libpq's ``connect_timeout`` (at least 2 s) to finish its startup. A caller waits
    at most ``command_timeout`` for a pooled connection when every one is busy (a
    pool smaller than the threads using it means waiting, not failing). A connection
    the server ended while it was idle is replaced before use (``AmberPool.getconn``);
    the call that finds one while the server is gone fails within ``timeout`` (per
    host), and the others then wait for a new connection up to ``command_timeout``.
    ``command_timeout`` also bounds opening the pool once the server has answered.
    After an outage the pool connects again on the first call made once the server is
    back, at most ``reconnect_seconds`` after it.
    """
    connect_timeout = _libpq_timeout(timeout)
    try:
        _probe_pg(url, timeout)
        psycopg.connect(url, connect_timeout=connect_timeout).close()
    except (psycopg.Error, ValueError) as exc:
        raise StoreUnavailable(
            f"PostgreSQL did not answer within {timeout:g}s: {exc}".strip(), url=redact(url)
        ) from None
    pool = AmberPool(
        url,
        probe_timeout=timeout,
        configure=_configure,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": connect_timeout},
        timeout=max(command_timeout, connect_timeout),
        reconnect_timeout=reconnect_seconds,
        open=False,
        name="amber",
    )
    try:
        pool.open(wait=True, timeout=max(command_timeout, connect_timeout))
    except PoolTimeout:
        pool.close()
        raise StoreUnavailable("PostgreSQL pool could not connect", url=redact(url)) from None
    return pool
