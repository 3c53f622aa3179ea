"""``amber.connect()``: one Redis client, one PostgreSQL pool, and the components on them."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
from psycopg_pool import ConnectionPool

from amber.checkpoints import AgentCheckpointer, Retention
from amber.config import Durability, Settings, load_settings
from amber.engines.connect import open_pg, open_redis
from amber.engines.embedded import ensure_embedded
from amber.keys import Keys
from amber.memory import (
    AgentMemory,
    ConsistencyVerifier,
    DualRecoveryStrategy,
    L1CacheRestorer,
    L1CacheSnapshotter,
    L1TTLManager,
)
from amber.memory.journal import L1Journal, sequence_floor
from amber.schema.migrations import migrate, schema_version

if TYPE_CHECKING:
    from amber.agents.base import ApiClient
    from amber.runtime.analyses import Analyses
    from amber.runtime.coordinator import LeadCoordinator
    from amber.runtime.pause import PauseManager
    from amber.runtime.reviews import Reviews
    from amber.runtime.steps import StepIntents


class Stack:
    """Both engines and amber's components on them, each built once. Use as a context manager.

    A composition root: it builds every collaborator and hands each what it needs; none
    of them refers back to the stack. The engines and working memory are built at once;
    the runtime (analyses, leases, steps, reviews, the coordinator, pauses) when first
    used, so a user of the engines alone (``amber.langgraph``) never loads it.
    """

    def __init__(
        self,
        settings: Settings,
        redis_url: str,
        database_url: str,
        market: ApiClient | None = None,
    ) -> None:
        self._closed = False
        self.settings = settings
        self.keys = Keys(settings.prefix)
        self.redis_url = redis_url
        self.database_url = database_url
        self.redis: redis.Redis = open_redis(
            redis_url,
            settings.connect_timeout,
            settings.command_timeout,
            settings.redis_retry_seconds,
        )
        try:
            self.pg: ConnectionPool = open_pg(
                database_url,
                settings.connect_timeout,
                settings.pg_pool_max,
                settings.command_timeout,
                settings.pg_reconnect_seconds,
            )
            migrate(self.pg)
        except BaseException:
            self.redis.close()
            if "pg" in self.__dict__:
                self.pg.close()
            raise
        s, keys = settings, self.keys
        self.snapshotter = L1CacheSnapshotter(self.redis, self.pg, keys, s.snapshot_ttl)
        """Snapshots L1 to the Redis secondary (and PostgreSQL on request)."""
        self.l1_journal: L1Journal | None = None
        """The working-memory write-ahead logs, in the ``wal`` durability mode only."""
        if s.durability == Durability.WAL:
            self.l1_journal = L1Journal(
                s.data_dir / "wal" / "l1" / keys.prefix,
                s.wal_fsync,
                sequence_floor(self.redis, keys, self.snapshotter, self.pg),
            )
        self.verifier = ConsistencyVerifier(self.redis, keys)
        """Hash and key-count checks around restores."""
        self.restorer = L1CacheRestorer(self.redis, self.pg, keys, self.verifier, s.active_ttl)
        """Restores L1 from the secondary or PostgreSQL."""
        self.ttl_manager = L1TTLManager(
            self.redis, keys, s.active_ttl, s.paused_ttl, s.snapshot_ttl
        )
        """Active and paused TTLs."""
        journal = self.l1_journal
        self.recovery = DualRecoveryStrategy(
            self.snapshotter,
            self.restorer,
            self.ttl_manager,
            (lambda agent, after, epoch: journal.replay(self.memory, agent, after, epoch))
            if journal
            else None,
        )
        """L1 → Redis secondary → PostgreSQL (plus the log's replay in ``wal`` mode)."""
        self.checkpointer = AgentCheckpointer(
            self.redis, self.pg, keys, s, self.snapshotter, journal=journal
        )
        """Saves and restores checkpoints."""
        self._market = market

    @cached_property
    def analyses(self) -> Analyses:
        """The analyses table, pause records, results, timeline and leases."""
        from amber.runtime.analyses import Analyses

        return Analyses(self.pg, self.settings.lease_seconds, self.settings.stuck_seconds)

    @cached_property
    def intents(self) -> StepIntents:
        """Intents of at-most-once steps (which are in doubt, how they were resolved)."""
        from amber.runtime.steps import StepIntents

        return StepIntents(self.pg)

    @cached_property
    def reviews(self) -> Reviews:
        """Reviews that waiting steps ask for, and their decisions."""
        from amber.runtime.reviews import Reviews

        return Reviews(self.pg)

    @cached_property
    def retention(self) -> Retention:
        """The checkpoint retention policy."""
        return Retention(self.redis, self.pg, self.keys, self.settings, self.analyses)

    @cached_property
    def coordinator(self) -> LeadCoordinator:
        """Runs analyses step by step: the one engine (an App's worker uses it too)."""
        from amber.runtime.coordinator import LeadCoordinator

        journal = self.l1_journal
        return LeadCoordinator(
            self.analyses,
            self.checkpointer,
            self.recovery,
            self.ttl_manager,
            self.retention,
            self.memory,
            self.settings,
            journal.release if journal else lambda agent_id: None,
            self._market,
            self.intents,
            self.reviews,
        )

    @cached_property
    def pause_manager(self) -> PauseManager:
        """Pauses and resumes analyses."""
        from amber.runtime.pause import PauseManager

        return PauseManager(self.analyses, self.coordinator)

    def memory(self, agent_id: str) -> AgentMemory:
        """The working memory of one agent (its writes logged first in ``wal`` mode)."""
        journal = self.l1_journal.journal(agent_id) if self.l1_journal else None
        return AgentMemory(self.redis, self.keys, agent_id, self.settings.active_ttl, journal)

    def schema_version(self) -> int:
        """The database's applied migration version."""
        return schema_version(self.pg)

    def server_versions(self) -> dict[str, str]:
        """Version strings reported by the two servers."""
        info: dict[str, Any] = self.redis.info("server")
        with self.pg.connection() as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return {"redis": str(info.get("redis_version")), "postgresql": str(row[0] if row else "")}

    def pg_primary(self) -> str:
        """Which PostgreSQL server amber writes to: ``host:port`` (or the socket directory)
        of the server a pooled connection reached; with a multi-host URL, the primary."""
        with self.pg.connection() as conn:
            info = conn.info
            return f"{info.host}:{info.port}"

    def close(self) -> None:
        """Close the Redis client and the PostgreSQL pool (servers keep running)."""
        if self._closed:
            return
        self._closed = True
        if "analyses" in self.__dict__:  # its heartbeat and liveness lock, if it ran
            self.analyses.close()
        if self.l1_journal is not None:
            self.l1_journal.close()
        self.redis.close()
        self.pg.close()

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(
    redis_url: str | None = None,
    database_url: str | None = None,
    data_dir: str | Path | None = None,
    prefix: str | None = None,
    announce: Callable[[str], None] | None = None,
    **settings: Any,
) -> Stack:
    """Open amber on the given URLs, or on embedded servers for those not given.

    Arguments left as None come from ``AMBER_*`` environment variables, then from
    ``amber.defaults``. Raises ``StoreUnavailable`` if an engine does not answer
    within ``connect_timeout`` seconds. ``announce`` is told when embedded servers had
    to be started, and where.
    """
    cfg = load_settings(
        redis_url=redis_url,
        database_url=database_url,
        data_dir=data_dir,
        prefix=prefix,
        **settings,
    )
    missing_redis = not cfg.redis_url
    missing_pg = not cfg.database_url
    urls: dict[str, str] = {}
    if missing_redis or missing_pg:
        urls = ensure_embedded(
            cfg.data_dir, redis=missing_redis, postgres=missing_pg, announce=announce
        )
    return Stack(cfg, cfg.redis_url or urls["redis"], cfg.database_url or urls["postgres"])
