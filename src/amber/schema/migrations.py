"""Schema migrations: an append-only list whose position is the version.

Each migration runs in its own transaction together with the row that records
it, under a transaction-level advisory lock, so two processes migrating at once
apply every step exactly once, and a failed step leaves the version where it was.
Never edit or reorder a published migration: append a new one.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from amber.errors import MigrationError

MIGRATIONS_TABLE = "amber_migrations"
ADVISORY_LOCK_ID = 0x616D626572  # "amber"

MIGRATIONS: list[str] = [
    # 1: checkpoints at subtask boundaries (DD-011) with their L1 snapshots (DD-016),
    #    the archive, and the analyses the coordinator runs.
    #    ``state`` is the whole checkpoint as zstd-compressed canonical JSON (the truth,
    #    checked by ``state_sha256``); the DD-011 columns beside it are a projection for
    #    SQL. ``l1_snapshot`` is DD-011's ``working_memory``: zstd canonical JSON, hashed
    #    by ``l1_snapshot_hash`` over keys, types and values.
    """
    CREATE TABLE agent_checkpoints (
        id BIGSERIAL PRIMARY KEY,
        checkpoint_id UUID NOT NULL UNIQUE,
        stock_ticker VARCHAR(32) NOT NULL,
        agent_type VARCHAR(128) NOT NULL,
        agent_id VARCHAR(128) NOT NULL,
        analysis_id UUID NOT NULL,
        checkpoint_time TIMESTAMPTZ NOT NULL,
        progress_pct NUMERIC(5,2),
        current_subtask VARCHAR(128),
        completed_subtasks TEXT[] NOT NULL DEFAULT '{}',
        pending_subtasks TEXT[] NOT NULL DEFAULT '{}',
        failure_reason TEXT,
        retry_count INT NOT NULL DEFAULT 0,
        agent_version VARCHAR(20) NOT NULL,
        state BYTEA NOT NULL,
        state_sha256 TEXT NOT NULL,
        l1_snapshot BYTEA,
        l1_snapshot_hash TEXT,
        l1_snapshot_seq BIGINT,
        created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        UNIQUE (analysis_id, agent_type, checkpoint_time)
    );
    CREATE INDEX idx_checkpoint_stock_agent ON agent_checkpoints (stock_ticker, agent_type);
    CREATE INDEX idx_checkpoint_latest ON agent_checkpoints (analysis_id, agent_type, id DESC);
    CREATE INDEX idx_checkpoint_l1_snapshot ON agent_checkpoints (analysis_id, agent_type, id DESC)
        WHERE l1_snapshot IS NOT NULL;
    CREATE TABLE agent_checkpoints_archive (LIKE agent_checkpoints INCLUDING DEFAULTS);
    ALTER TABLE agent_checkpoints_archive ADD COLUMN archived_at TIMESTAMPTZ NOT NULL DEFAULT NOW();
    CREATE INDEX idx_archive_analysis ON agent_checkpoints_archive (analysis_id);
    CREATE TABLE analyses (
        analysis_id UUID PRIMARY KEY,
        stock_ticker VARCHAR(32) NOT NULL,
        agents JSONB NOT NULL,
        status VARCHAR(16) NOT NULL,
        preserve BOOLEAN NOT NULL DEFAULT FALSE,
        created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        finished_at TIMESTAMPTZ
    );
    CREATE INDEX idx_analyses_status ON analyses (status, updated_at);
    """,
    # 2: durable pause records (who, why, when, each agent's state) and their resumes
    """
    CREATE TABLE analysis_pauses (
        id BIGSERIAL PRIMARY KEY,
        analysis_id UUID NOT NULL REFERENCES analyses (analysis_id) ON DELETE CASCADE,
        reason TEXT NOT NULL,
        paused_by TEXT NOT NULL,
        paused_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        agents JSONB NOT NULL,
        resumed_at TIMESTAMPTZ,
        resumed_by TEXT,
        resume_report JSONB
    );
    CREATE INDEX idx_pauses_analysis ON analysis_pauses (analysis_id, id DESC);
    """,
    # 3: an agent's newest snapshot sequence, found by agent id (the wal mode's floor)
    """
    CREATE INDEX idx_checkpoint_agent_seq ON agent_checkpoints (agent_id, l1_snapshot_seq DESC)
        WHERE l1_snapshot IS NOT NULL;
    """,
    # 4: checkpoints numbered per agent (seq), written only as seq = previous + 1 by a
    #    compare-and-set insert (checkpoints/sql.py); who wrote each; recorded sizes that
    #    bound decompression; the L1 snapshot's epoch and key count. Pauses record when
    #    their agents were frozen, and why that failed if it did.
    """
    ALTER TABLE agent_checkpoints ADD COLUMN seq BIGINT, ADD COLUMN writer TEXT,
        ADD COLUMN state_size INT, ADD COLUMN l1_snapshot_size INT,
        ADD COLUMN l1_snapshot_epoch TEXT, ADD COLUMN l1_snapshot_keys INT;
    UPDATE agent_checkpoints c SET seq = n.rn FROM (
        SELECT id, row_number() OVER (PARTITION BY analysis_id, agent_type ORDER BY id) AS rn
        FROM agent_checkpoints) n
    WHERE c.id = n.id;
    ALTER TABLE agent_checkpoints ALTER COLUMN seq SET NOT NULL;
    ALTER TABLE agent_checkpoints ADD CONSTRAINT agent_checkpoints_seq_key
        UNIQUE (analysis_id, agent_type, seq);
    ALTER TABLE agent_checkpoints
        DROP CONSTRAINT agent_checkpoints_analysis_id_agent_type_checkpoint_time_key;
    DROP INDEX idx_checkpoint_latest;
    ALTER TABLE agent_checkpoints_archive ADD COLUMN seq BIGINT, ADD COLUMN writer TEXT,
        ADD COLUMN state_size INT, ADD COLUMN l1_snapshot_size INT,
        ADD COLUMN l1_snapshot_epoch TEXT, ADD COLUMN l1_snapshot_keys INT;
    ALTER TABLE analysis_pauses ADD COLUMN frozen_at TIMESTAMPTZ, ADD COLUMN error TEXT;
    UPDATE analysis_pauses SET frozen_at = paused_at;
    """,
    # 5: L1 snapshots stored as a chain: a whole one, then deltas (only the keys that
    #    changed), each applying to the snapshot row before it (l1_snapshot_base).
    """
    ALTER TABLE agent_checkpoints ADD COLUMN l1_snapshot_base BIGINT;
    ALTER TABLE agent_checkpoints_archive ADD COLUMN l1_snapshot_base BIGINT;
    """,
]


def _table_exists(conn: psycopg.Connection[Any], table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    return row is not None and row[0] is not None


def schema_version(pool: ConnectionPool, table: str = MIGRATIONS_TABLE) -> int:
    """The highest migration applied in this database (0 if none)."""
    with pool.connection() as conn:
        if not _table_exists(conn, table):
            return 0
        row = conn.execute(
            sql.SQL("SELECT COALESCE(MAX(version), 0) FROM {}").format(sql.Identifier(table))
        ).fetchone()
        return int(row[0]) if row else 0


def _current(conn: psycopg.Connection[Any], ident: sql.Identifier, known: int) -> int:
    row = conn.execute(sql.SQL("SELECT COALESCE(MAX(version), 0) FROM {}").format(ident)).fetchone()
    current = int(row[0]) if row else 0
    if current > known:
        raise MigrationError(
            f"database schema is at version {current}, newer than this amber knows ({known}); "
            "upgrade amber",
            version=current,
        )
    return current


def migrate(
    pool: ConnectionPool,
    migrations: list[str] | None = None,
    table: str = MIGRATIONS_TABLE,
    lock_id: int = ADVISORY_LOCK_ID,
) -> list[int]:
    """Apply every migration not yet applied; return the versions this call applied.

    Raises ``MigrationError`` if a step fails (its transaction is rolled back) or
    if the database has a newer schema than ``migrations`` describes.
    """
    steps = MIGRATIONS if migrations is None else migrations
    ident = sql.Identifier(table)
    applied: list[int] = []
    with pool.connection() as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (version INT PRIMARY KEY,"
                    " applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW())"
                ).format(ident)
            )
        for version, step in enumerate(steps, start=1):
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
                    current = _current(conn, ident, len(steps))
                    if current >= version:
                        continue
                    conn.execute(step.encode())
                    conn.execute(
                        sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(ident), (version,)
                    )
                    applied.append(version)
            except psycopg.Error as exc:
                raise MigrationError(
                    f"migration {version} failed and was rolled back: {exc}", version=version
                ) from None
        _current(conn, ident, len(steps))
    return applied
