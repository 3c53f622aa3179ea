"""One typed settings object, read from ``AMBER_*`` environment variables."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from amber import defaults
from amber.errors import ConfigError


class Durability(StrEnum):
    """How far a write travels before amber acknowledges it."""

    HYBRID = "hybrid"
    """Checkpoint → Redis secondary only; pause → Redis + PostgreSQL (DD-016)."""
    CHECKPOINT = "checkpoint"
    """Every checkpoint → Redis + PostgreSQL, snapshot included (DD-011)."""
    WAL = "wal"
    """As ``checkpoint``, and every L1 write is logged to a local WAL first (ADR-003)."""


class Settings(BaseSettings):
    """amber's configuration. Every field has an ``AMBER_`` environment variable."""

    model_config = SettingsConfigDict(env_prefix="AMBER_", extra="ignore")

    redis_url: str | None = None
    """Redis to use; None starts an embedded one under ``data_dir``."""
    database_url: str | None = None
    """PostgreSQL to use; None starts an embedded one under ``data_dir``."""
    data_dir: Path = Path(defaults.DATA_DIR)
    prefix: str = defaults.PREFIX
    durability: Durability = Durability(defaults.DURABILITY)
    active_ttl: int = Field(defaults.ACTIVE_TTL, gt=0)
    paused_ttl: int = Field(defaults.PAUSED_TTL, gt=0)
    checkpoint_backup_ttl: int = Field(defaults.CHECKPOINT_BACKUP_TTL, gt=0)
    snapshot_ttl: int = Field(defaults.SNAPSHOT_TTL, gt=0)
    failed_retention: int = Field(defaults.FAILED_RETENTION, gt=0)
    connect_timeout: float = Field(defaults.CONNECT_TIMEOUT, gt=0)
    pg_pool_max: int = Field(defaults.PG_POOL_MAX, ge=1)
    max_retries: int = Field(defaults.MAX_RETRIES, ge=0)
    wal_fsync: Literal["always", "batch", "off"] = defaults.WAL_FSYNC  # type: ignore[assignment]
    """fsync policy of the working-memory logs in the ``wal`` durability mode."""


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with non-None ``overrides`` on top.

    Raises ``ConfigError`` naming the offending variable when a value is malformed.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"invalid setting AMBER_{field.upper()}: {first['msg']}", setting=field
        ) from None
