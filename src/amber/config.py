"""One typed settings object, read from ``AMBER_*`` environment variables.

Unknown settings are refused, as keyword arguments and as ``AMBER_*`` variables
(``AMBER_DURABILTY`` is a typo, not something to ignore), except the few
variables in ``OTHER_VARIABLES`` that are read by something other than ``Settings``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from amber import defaults
from amber.errors import AmberError, ConfigError
from amber.keys import check_prefix
from amber.redis_url import parse_redis_url

ENV_PREFIX = "AMBER_"

OTHER_VARIABLES = frozenset({"AMBER_APP"})
"""``AMBER_*`` variables that are not settings but are allowed: ``AMBER_APP`` names
the application (``module:attr``) the command line loads."""


class Durability(StrEnum):
    """How far a write travels before amber acknowledges it."""

    CHECKPOINT = "checkpoint"
    """The default: every checkpoint → Redis + PostgreSQL, with the working memory's
    changes since the previous one (a whole image every so often), so PostgreSQL alone
    rebuilds the memory of every checkpoint (DD-011)."""
    HYBRID = "hybrid"
    """Opt-in: checkpoint → Redis secondary only; pause → Redis + PostgreSQL (DD-016). A
    Redis loss rolls an agent back to its last pause (docs/checkpoints.md)."""
    WAL = "wal"
    """As ``checkpoint``, and every L1 write is logged to a local WAL first (ADR-003)."""


def _url(value: str | None) -> str | None:
    if value is not None and "\x00" in value:
        raise ValueError("a URL cannot contain a NUL character")
    return value


def _redis_url(value: str | None) -> str | None:
    if value:
        parse_redis_url(value)  # a ValueError saying which forms are accepted
    return value


def _path(value: Path) -> Path:
    try:
        raw = os.fsencode(value)
    except UnicodeEncodeError:
        raise ValueError("not a file system path: it holds a lone surrogate") from None
    if b"\x00" in raw:
        raise ValueError("a path cannot contain a NUL character")
    return value


def _prefix(value: str) -> str:
    return check_prefix(value)  # InvalidIdentifier is a ValueError: pydantic reports it


Url = Annotated[str | None, Field(max_length=defaults.URL_MAX_LEN), AfterValidator(_url)]
Ttl = Annotated[int, Field(gt=0, le=defaults.TTL_MAX)]
RedisUrl = Annotated[Url, AfterValidator(_redis_url)]
Timeout = Annotated[float, Field(gt=0, le=defaults.TIMEOUT_MAX, allow_inf_nan=False)]


def find_data_dir(start: Path | None = None) -> Path:
    """The nearest existing ``.amber`` directory in ``start`` (the working directory) or
    one of its parents, so a command run from a subdirectory finds the project's servers
    instead of starting a second pair; ``./.amber`` when there is none."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / defaults.DATA_DIR
        if candidate.is_dir():
            return candidate if folder != here else Path(defaults.DATA_DIR)
    return Path(defaults.DATA_DIR)


def _nearest() -> Path:
    return find_data_dir()


class Settings(BaseSettings):
    """amber's configuration. Every field has an ``AMBER_`` environment variable.

    An unknown field or a malformed value raises ``ConfigError`` naming it.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    redis_url: RedisUrl = None
    """Redis to use (one server, ``redis+cluster://`` or ``redis+sentinel://``, see
    ``amber.redis_url``); None starts an embedded one under ``data_dir``."""
    database_url: Url = None
    """PostgreSQL to use; None starts an embedded one under ``data_dir``."""
    data_dir: Annotated[Path, AfterValidator(_path)] = Field(default_factory=lambda: _nearest())
    """Embedded servers, WAL segments, checkpoint files. By default the nearest
    ``.amber`` in this directory or one above it (as git finds ``.git``), else
    ``./.amber``."""
    prefix: Annotated[str, AfterValidator(_prefix)] = defaults.PREFIX
    durability: Durability = Durability(defaults.DURABILITY)
    on_memory_lost: Literal["rollback", "pause"] = defaults.ON_MEMORY_LOST  # type: ignore[assignment]
    """What an agent does when the working memory of its newest checkpoint cannot be
    rebuilt (only in ``hybrid`` after a Redis loss, or when snapshots are corrupt): roll
    back to the newest checkpoint whose memory can be and run the steps after it again,
    or pause the analysis saying so."""
    active_ttl: Ttl = defaults.ACTIVE_TTL
    paused_ttl: Ttl = defaults.PAUSED_TTL
    checkpoint_backup_ttl: Ttl = defaults.CHECKPOINT_BACKUP_TTL
    snapshot_ttl: Ttl = defaults.SNAPSHOT_TTL
    failed_retention: Ttl = defaults.FAILED_RETENTION
    connect_timeout: Timeout = defaults.CONNECT_TIMEOUT
    """Seconds a server has to accept a connection and answer a first command."""
    command_timeout: Timeout = defaults.COMMAND_TIMEOUT
    """Seconds one command may take once connected."""
    redis_retry_seconds: Annotated[
        float, Field(ge=0, le=defaults.TIMEOUT_MAX, allow_inf_nan=False)
    ] = defaults.REDIS_RETRY_SECONDS
    """Seconds a Redis command that failed before it could run (failover, ``CLUSTERDOWN``,
    ``TRYAGAIN``, refused connection) is retried with backoff; 0: never."""
    pg_reconnect_seconds: Annotated[
        float, Field(ge=0.1, le=defaults.TIMEOUT_MAX, allow_inf_nan=False)
    ] = defaults.PG_RECONNECT_SECONDS
    """Seconds a lost PostgreSQL connection (a restart, a failover to a standby) is tried
    again in the background before the next statement connects afresh; with a multi-host
    URL that next connection finds whichever host is the primary now."""
    pg_pool_max: int = Field(defaults.PG_POOL_MAX, ge=1, le=10_000)
    """Most pooled PostgreSQL connections per process. Connections are taken per
    statement, so a pool smaller than ``worker_concurrency * agent_concurrency`` only
    makes steps wait their turn (at most ``connect_timeout``, then ``StoreUnavailable``)."""
    lease_seconds: Annotated[float, Field(ge=0.5, le=defaults.DAY, allow_inf_nan=False)] = (
        defaults.LEASE_SECONDS
    )
    """Seconds a run's lease on an analysis lasts unless its heartbeat renews it: a run
    that could not renew it for this long stops at its next step."""
    stuck_seconds: Annotated[float | None, Field(ge=0.5, le=defaults.DAY, allow_inf_nan=False)] = (
        None
    )
    """Seconds a live process may go without renewing a lease before another worker takes
    the analysis over as stuck (a process that died loses its leases at once). At least
    ``lease_seconds``; None: ``STUCK_FACTOR`` leases (60 s for the default lease)."""
    worker_concurrency: int = Field(defaults.WORKER_CONCURRENCY, ge=1, le=10_000)
    """Analyses one ``amber worker`` process runs at once."""
    agent_concurrency: int = Field(defaults.AGENT_CONCURRENCY, ge=1, le=10_000)
    """Agents of one analysis run at once (each one's steps in order)."""
    worker_poll: Annotated[float, Field(gt=0, le=defaults.HOUR, allow_inf_nan=False)] = (
        defaults.WORKER_POLL
    )
    """Seconds an idle worker waits before looking for work again."""
    max_retries: int = Field(defaults.MAX_RETRIES, ge=0, le=defaults.INT_MAX)
    wal_fsync: Literal["always", "batch", "off"] = defaults.WAL_FSYNC  # type: ignore[assignment]
    """fsync policy of the working-memory logs in the ``wal`` durability mode."""
    serve_token: Annotated[str | None, Field(min_length=16, max_length=256, repr=False)] = None
    """The token ``amber serve`` requires (``Authorization: Bearer`` or ``X-Amber-Token``);
    None: a random one per process, and the server binds only to loopback."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _config_error(exc) from None
        if self.stuck_seconds is None:
            self.stuck_seconds = self.lease_seconds * defaults.STUCK_FACTOR
        elif self.stuck_seconds < self.lease_seconds:
            raise ConfigError(
                f"invalid setting {ENV_PREFIX}STUCK_SECONDS: {self.stuck_seconds:g} is shorter"
                f" than the lease ({self.lease_seconds:g} s); it must be at least as long",
                setting="stuck_seconds",
            )


def _config_error(exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        hint = _did_you_mean(field, list(Settings.model_fields))
        return ConfigError(f"unknown setting {field!r}{hint}", setting=field)
    cause = first.get("ctx", {}).get("error")
    message = cause.message if isinstance(cause, AmberError) else str(first["msg"])
    message = message.removeprefix("Value error, ")
    return ConfigError(f"invalid setting {ENV_PREFIX}{field.upper()}: {message}", setting=field)


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def known_variables() -> frozenset[str]:
    """Every ``AMBER_*`` environment variable amber reads: the settings' and the others."""
    names = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    return frozenset(names) | OTHER_VARIABLES


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Raise ``ConfigError`` naming the first ``AMBER_*`` variable amber does not know."""
    known = known_variables()
    env = os.environ if environ is None else environ
    for name in sorted(env):
        upper = name.upper()  # settings are read whatever the case of the name
        if upper.startswith(ENV_PREFIX) and upper not in known:
            hint = _did_you_mean(upper, sorted(known))
            raise ConfigError(
                f"unknown environment variable {name}: not an amber setting{hint}",
                variable=name,
            )


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with non-None ``overrides`` on top.

    Raises ``ConfigError`` naming the offending variable or argument when a value is
    malformed, an argument is not a setting, or an ``AMBER_*`` variable is unknown.
    """
    check_environment()
    for name in overrides:
        if name not in Settings.model_fields:  # None or not: a typo is refused either way
            hint = _did_you_mean(name, list(Settings.model_fields))
            raise ConfigError(f"unknown setting {name!r}{hint}", setting=name)
    given = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**given)
