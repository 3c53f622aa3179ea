"""``amber.connect()``: one Redis client, one PostgreSQL pool, and the components on them."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
from psycopg_pool import ConnectionPool

from amber.checkpoints import AgentCheckpointer, Analyses, Retention
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
from amber.memory.journal import L1Journal
from amber.memory.working import Journal
from amber.schema.migrations import migrate, schema_version

if TYPE_CHECKING:
    from amber.agents.coordinator import LeadCoordinator
    from amber.pause import PauseManager


class Stack:
    """Both engines and amber's components on them. Use as a context manager."""

    def __init__(self, settings: Settings, redis_url: str, database_url: str) -> None:
        self._closed = False
        self.settings = settings
        self.keys = Keys(settings.prefix)
        self.redis_url = redis_url
        self.database_url = database_url
        self.redis: redis.Redis = open_redis(redis_url, settings.connect_timeout)
        try:
            self.pg: ConnectionPool = open_pg(
                database_url, settings.connect_timeout, settings.pg_pool_max
            )
            migrate(self.pg)
        except BaseException:
            self.redis.close()
            if "pg" in self.__dict__:
                self.pg.close()
            raise

    # -- L1 working memory (DD-016) --------------------------------------------------
    def memory(self, agent_id: str) -> AgentMemory:
        """The working memory of one agent."""
        journal = self.l1_journal.journal(agent_id) if self.l1_journal else None
        return self._memory(agent_id, journal)

    def _memory(self, agent_id: str, journal: Journal | None) -> AgentMemory:
        return AgentMemory(self.redis, self.keys, agent_id, self.settings.active_ttl, journal)

    @cached_property
    def l1_journal(self) -> L1Journal | None:
        """The working-memory write-ahead logs, in the ``wal`` durability mode only."""
        if self.settings.durability != Durability.WAL:
            return None
        directory = self.settings.data_dir / "wal" / "l1" / self.keys.prefix
        return L1Journal(directory, self.settings.wal_fsync, self._sequence_floor)

    def _sequence_floor(self, agent_id: str) -> int:
        """The highest sequence Redis, the secondary or PostgreSQL has seen for an agent."""
        seqs = [self._memory(agent_id, None).sequence()]
        meta = self.snapshotter.latest_meta(agent_id)
        seqs.append(meta.seq if meta else 0)
        with self.pg.connection() as conn:
            row = conn.execute(
                "SELECT max(l1_snapshot_seq) FROM agent_checkpoints"
                " WHERE agent_id = %s AND l1_snapshot IS NOT NULL",
                (agent_id,),
            ).fetchone()
        seqs.append(int(row[0]) if row and row[0] is not None else 0)
        return max(seqs)

    @cached_property
    def snapshotter(self) -> L1CacheSnapshotter:
        """Snapshots L1 to the Redis secondary (and PostgreSQL on request)."""
        return L1CacheSnapshotter(self.redis, self.pg, self.keys, self.settings.snapshot_ttl)

    @cached_property
    def verifier(self) -> ConsistencyVerifier:
        """Hash and key-count checks around restores."""
        return ConsistencyVerifier(self.redis, self.keys)

    @cached_property
    def restorer(self) -> L1CacheRestorer:
        """Restores L1 from the secondary or PostgreSQL."""
        return L1CacheRestorer(
            self.redis, self.pg, self.keys, self.verifier, self.settings.active_ttl
        )

    @cached_property
    def ttl_manager(self) -> L1TTLManager:
        """Active and paused TTLs."""
        s = self.settings
        return L1TTLManager(self.redis, self.keys, s.active_ttl, s.paused_ttl, s.snapshot_ttl)

    @cached_property
    def recovery(self) -> DualRecoveryStrategy:
        """L1 → Redis secondary → PostgreSQL."""
        journal = self.l1_journal
        replayer = (
            (lambda agent, after: journal.replay(self.memory, agent, after)) if journal else None
        )
        return DualRecoveryStrategy(self.snapshotter, self.restorer, self.ttl_manager, replayer)

    # -- checkpoints (DD-011) and analyses ----------------------------------------------
    @cached_property
    def checkpointer(self) -> AgentCheckpointer:
        """Saves and restores checkpoints."""
        return AgentCheckpointer(
            self.redis, self.pg, self.keys, self.settings, self.snapshotter, journal=self.l1_journal
        )

    @cached_property
    def analyses(self) -> Analyses:
        """The analyses table."""
        return Analyses(self.pg)

    @cached_property
    def retention(self) -> Retention:
        """The checkpoint retention policy."""
        return Retention(self.redis, self.pg, self.keys, self.settings, self.analyses)

    @cached_property
    def coordinator(self) -> LeadCoordinator:
        """Runs analyses subtask by subtask."""
        from amber.agents.coordinator import LeadCoordinator

        return LeadCoordinator(self)

    @cached_property
    def pause_manager(self) -> PauseManager:
        """Pauses and resumes analyses; quota errors in ``coordinator`` become pauses."""
        from amber.pause import PauseManager

        return PauseManager(self)

    def schema_version(self) -> int:
        """The database's applied migration version."""
        return schema_version(self.pg)

    def server_versions(self) -> dict[str, str]:
        """Version strings reported by the two servers."""
        info: dict[str, Any] = self.redis.info("server")
        with self.pg.connection() as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return {"redis": str(info.get("redis_version")), "postgresql": str(row[0] if row else "")}

    def close(self) -> None:
        """Close the Redis client and the PostgreSQL pool (servers keep running)."""
        if self._closed:
            return
        self._closed = True
        if "l1_journal" in self.__dict__ and self.l1_journal is not None:
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
    **settings: Any,
) -> Stack:
    """Open amber on the given URLs, or on embedded servers for those not given.

    Arguments left as None come from ``AMBER_*`` environment variables, then from
    ``amber.defaults``. Raises ``StoreUnavailable`` if an engine does not answer
    within ``connect_timeout`` seconds.
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
        urls = ensure_embedded(cfg.data_dir, redis=missing_redis, postgres=missing_pg)
    return Stack(cfg, cfg.redis_url or urls["redis"], cfg.database_url or urls["postgres"])
