"""Which Redis deployment a URL names: one server, a Redis Cluster, or a Sentinel-managed primary.

Accepted forms (no I/O here; ``amber.engines.connect`` opens the client):

- ``redis://``, ``rediss://``, ``unix://`` — one server (redis-py's own URL form).
- ``redis+cluster://[user:password@]host:port[,host:port...]`` — a Redis Cluster,
  found from any of the seed nodes; ``rediss+cluster://`` for TLS.
- ``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]`` —
  the primary that the Sentinels name ``service_name``; ``rediss+sentinel://`` for TLS.
  The password is the primary's; Sentinels are asked without one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

ACCEPTED = (
    "redis://host:port/db, rediss://..., unix:///path.sock,"
    " redis+cluster://host:port[,host:port...],"
    " redis+sentinel://host:port[,host:port...]/service_name[/db]"
)
"""The URL forms amber accepts for Redis, as said in errors."""

_SINGLE = ("redis", "rediss", "unix")
_CLUSTER = ("redis+cluster", "rediss+cluster")
_SENTINEL = ("redis+sentinel", "rediss+sentinel")


@dataclass(frozen=True)
class RedisTarget:
    """A parsed Redis URL. ``url`` is the single-server URL for ``kind == "single"``."""

    kind: Literal["single", "cluster", "sentinel"]
    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False


def _nodes(netloc: str) -> tuple[tuple[str, int], ...]:
    hosts = netloc.rpartition("@")[2]
    found = []
    for part in hosts.split(","):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{part!r} is not host:port")
        found.append((host.strip("[]"), int(port)))
    return tuple(found)


def _query_names(scheme: str) -> set[str]:
    """The query parameters redis-py takes in a ``scheme`` URL: those it parses and the
    connection's own keyword arguments (anything else reaches the connection and fails)."""
    import inspect

    from redis import connection as rc

    cls = {"rediss": rc.SSLConnection, "unix": rc.UnixDomainSocketConnection}.get(
        scheme, rc.Connection
    )
    names = set(rc.URL_QUERY_ARGUMENT_PARSERS)
    for klass in (cls, rc.AbstractConnection):
        names |= set(inspect.signature(klass).parameters)
    return names - {"self", "kwargs", "args"}


def _check_query(scheme: str, given: list[str]) -> None:
    known = _query_names(scheme)
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown query parameter {name!r} in a {scheme}:// URL{hint}")


def parse_redis_url(url: str) -> RedisTarget:
    """The deployment ``url`` names; ``ValueError`` saying which forms are accepted."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _SINGLE + _CLUSTER + _SENTINEL:
        raise ValueError(f"unknown Redis URL scheme {scheme or url!r}; accepted: {ACCEPTED}")
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if scheme in _SINGLE:
        if "cluster" in query:
            raise ValueError(
                f"'?cluster=' is not how amber selects a cluster; use redis+cluster://host:port"
                f" (accepted: {ACCEPTED})"
            )
        _check_query(scheme, list(query))
        return RedisTarget("single", url)
    if query:
        raise ValueError(f"{scheme}:// takes no query parameters; accepted: {ACCEPTED}")
    creds = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    user, _, password = creds.partition(":")
    try:
        nodes = _nodes(parts.netloc)
    except ValueError as exc:
        raise ValueError(f"{scheme}://: {exc}; accepted: {ACCEPTED}") from None
    common = {
        "nodes": nodes,
        "username": unquote(user) or None,
        "password": unquote(password) or None,
        "tls": scheme.startswith("rediss"),
    }
    path = [p for p in parts.path.split("/") if p]
    if scheme in _CLUSTER:
        if path:
            raise ValueError(
                f"a cluster has only database 0: {url!r} has a path; accepted: {ACCEPTED}"
            )
        return RedisTarget("cluster", url, **common)  # type: ignore[arg-type]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError(f"redis+sentinel:// needs /service_name[/db]; accepted: {ACCEPTED}")
    db = int(path[1]) if len(path) == 2 else 0
    return RedisTarget("sentinel", url, service=unquote(path[0]), db=db, **common)  # type: ignore[arg-type]
