"""What ``PersistenceManager`` and ``SyncPersistenceManager`` share: their construction.

Settings, keys and TTLs are resolved once here; the two differ only in the client
they open (``redis.asyncio`` or ``redis``) and in awaiting its replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import redis
import redis.asyncio as aioredis
from redis.backoff import NoBackoff

from amber import defaults
from amber.config import load_settings
from amber.engines.connect import redact
from amber.engines.embedded import ensure_embedded
from amber.errors import ConfigError, ValidationError
from amber.keys import Keys
from amber.persistence import scripts
from amber.persistence.core import Core, ttl_ms
from amber.redis_url import parse_redis_url

C = TypeVar("C", redis.Redis, aioredis.Redis)
"""The client of one flavor; on a cluster it is the flavor's ``RedisCluster``, typed as the
flavor's ``Redis`` (the persistence module calls only what both offer)."""


@dataclass(frozen=True)
class Flavor:
    """The classes of one redis-py API (sync or asyncio) that a client is made of."""

    redis: Any
    cluster: Any
    node: Any
    sentinel: Any
    retry: Any
    script: Any


def _client(flavor: Flavor, url: str, connect_timeout: float, command_timeout: float) -> Any:
    """A client for one server, a Redis Cluster or a Sentinel-managed primary."""
    target = parse_redis_url(url)
    common: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": command_timeout,
        "retry": flavor.retry(NoBackoff(), 1),
    }
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.kind == "cluster":
        nodes = [flavor.node(host, port) for host, port in target.nodes]
        return flavor.cluster(startup_nodes=nodes, ssl=target.tls, **auth, **common)
    if target.kind == "sentinel":
        sentinel = flavor.sentinel(
            list(target.nodes),
            sentinel_kwargs={"socket_connect_timeout": connect_timeout},
            ssl=target.tls,
        )
        return sentinel.master_for(target.service, db=target.db, **auth, **common)
    return flavor.redis.from_url(url, **common)


class Shell(Generic[C]):
    """Sessions, tasks and reviews of agents in one Redis (a server, a cluster or a
    Sentinel-managed primary), under one key prefix.

    Give ``redis_url`` or an open ``client`` (which is then left open by
    ``close()``); with neither, ``AMBER_REDIS_URL`` is used, else amber's embedded
    Redis under ``data_dir``. ``prefix`` defaults to ``AMBER_PREFIX`` (``amber``);
    ``session_ttl`` and ``task_ttl`` are seconds. ``timeout`` bounds every connect
    and reply; by default a connect is bounded by ``AMBER_CONNECT_TIMEOUT`` and a
    reply by ``AMBER_COMMAND_TIMEOUT``.
    """

    flavor: ClassVar[Flavor]

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        client: C | None = None,
        prefix: str | None = None,
        session_ttl: float = defaults.SESSION_TTL,
        task_ttl: float = defaults.TASK_TTL,
        timeout: float | None = None,
        data_dir: str | Path | None = None,
    ) -> None:
        if redis_url is not None and client is not None:
            raise ValidationError("give redis_url or client, not both", field="client")
        try:
            settings = load_settings(
                redis_url=redis_url or None,
                prefix=prefix,
                connect_timeout=timeout,
                command_timeout=timeout,
                data_dir=data_dir,
            )
        except ConfigError as exc:
            if "setting" not in exc.context:
                raise  # an unknown AMBER_* variable: the environment, not an argument
            field = str(exc.context["setting"])
            raise ValidationError(exc.message, field=field) from None
        keys = Keys(settings.prefix)
        session_ttl_ms = ttl_ms(session_ttl, "session_ttl")
        task_ttl_ms = ttl_ms(task_ttl, "task_ttl")
        self._owns_client = client is None
        if client is None:
            url = settings.redis_url
            if not url:
                url = ensure_embedded(settings.data_dir, redis=True, postgres=False)["redis"]
            self.url = redact(url)
            try:
                client = _client(
                    self.flavor, url, settings.connect_timeout, settings.command_timeout
                )
            except ValueError as exc:
                raise ValidationError(
                    f"redis_url is not a usable Redis URL: {exc}", field="redis_url", url=self.url
                ) from None
        else:
            self.url = "(client)"
        self.redis: C = client
        cluster = isinstance(client, self.flavor.cluster)
        self.core = Core(keys, session_ttl_ms, task_ttl_ms, cluster=cluster)
        self.keys = keys
        self._scripts: dict[str, Any] = {
            name: self.flavor.script(client, lua) for name, lua in scripts.SCRIPTS.items()
        }
