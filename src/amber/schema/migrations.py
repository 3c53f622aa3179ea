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
from amber.schema.lg_functions import (
    NAMED_CHECK_V5,
    NAMED_CHECK_V11,
    WITNESSED_CHECK_V14,
    lg_put,
)

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
    # 6: amber.langgraph (langgraph/sql.py). LangGraph checkpoints: a row per checkpoint
    #    whose body (the checkpoint less its channel values, metadata, parent) is checked
    #    by ``body_sha256``; its ``seq`` changes whenever the row does and names the Redis
    #    hot copy; ``channels``/``versions`` project the body's channel versions for joins.
    #    Channel values by version and pending writes, each with a SHA-256. Per-thread TTLs.
    #    The store: JSONB values (for filters) and their JSON size, fractional-minute TTLs, a
    #    version per write.
    #    amber compresses what it stores, so PostgreSQL is told not to try again (EXTERNAL).
    """
    CREATE SEQUENCE lg_checkpoint_seq;
    CREATE TABLE lg_checkpoints (
        thread_id TEXT COLLATE "C" NOT NULL,
        checkpoint_ns TEXT COLLATE "C" NOT NULL,
        checkpoint_id TEXT COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL DEFAULT nextval('lg_checkpoint_seq'),
        run_id TEXT,
        metadata JSONB NOT NULL,
        channels TEXT[] NOT NULL,
        versions TEXT[] NOT NULL,
        body BYTEA NOT NULL,
        body_size INT,
        body_sha256 BYTEA NOT NULL,
        created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    ALTER TABLE lg_checkpoints ALTER COLUMN body SET STORAGE EXTERNAL;
    CREATE INDEX lg_checkpoints_run ON lg_checkpoints (run_id) WHERE run_id IS NOT NULL;
    CREATE TABLE lg_blobs (
        thread_id TEXT COLLATE "C" NOT NULL,
        checkpoint_ns TEXT COLLATE "C" NOT NULL,
        channel TEXT COLLATE "C" NOT NULL,
        version TEXT COLLATE "C" NOT NULL,
        type TEXT NOT NULL,
        data BYTEA NOT NULL,
        size INT,
        sha256 BYTEA NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
    );
    ALTER TABLE lg_blobs ALTER COLUMN data SET STORAGE EXTERNAL;
    CREATE TABLE lg_writes (
        thread_id TEXT COLLATE "C" NOT NULL,
        checkpoint_ns TEXT COLLATE "C" NOT NULL,
        checkpoint_id TEXT COLLATE "C" NOT NULL,
        task_id TEXT COLLATE "C" NOT NULL,
        idx INT NOT NULL,
        task_path TEXT NOT NULL DEFAULT '',
        channel TEXT NOT NULL,
        type TEXT NOT NULL,
        data BYTEA NOT NULL,
        size INT,
        sha256 BYTEA NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    );
    ALTER TABLE lg_writes ALTER COLUMN data SET STORAGE EXTERNAL;
    CREATE TABLE lg_threads (
        thread_id TEXT COLLATE "C" PRIMARY KEY,
        ttl_seconds DOUBLE PRECISION,
        expires_at TIMESTAMPTZ
    );
    CREATE INDEX lg_threads_expiry ON lg_threads (expires_at) WHERE expires_at IS NOT NULL;
    CREATE SEQUENCE lg_store_version;
    CREATE TABLE lg_store (
        prefix TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL,
        value JSONB NOT NULL,
        size INT NOT NULL,
        version BIGINT NOT NULL DEFAULT nextval('lg_store_version'),
        created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        updated_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        ttl_minutes DOUBLE PRECISION,
        expires_at TIMESTAMPTZ,
        PRIMARY KEY (prefix, key)
    );
    CREATE INDEX lg_store_expiry ON lg_store (expires_at) WHERE expires_at IS NOT NULL;
"""
    + lg_put(False, NAMED_CHECK_V5)
    + "    CREATE FUNCTION lg_number(v JSONB) RETURNS NUMERIC"
    + """ LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE jsonb_typeof(v)
            WHEN 'number' THEN (v #>> '{}')::numeric
            WHEN 'string' THEN CASE
                WHEN btrim(v #>> '{}') ~ '^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$'
                THEN btrim(v #>> '{}')::numeric END
        END
    $$;
    """,
    # 7: the runtime. Analyses become a queue: a ``running`` analysis without a live lease
    #    is claimable (``FOR UPDATE SKIP LOCKED``); a lease names its owner run, the
    #    owner process's liveness lock and when it lapses. Results of finished agents,
    #    a timeline of events, intents of at-most-once steps, and reviews.
    """
    ALTER TABLE analyses ADD COLUMN definition VARCHAR(128), ADD COLUMN input JSONB,
        ADD COLUMN lease_owner TEXT, ADD COLUMN lease_key INT,
        ADD COLUMN lease_expires TIMESTAMPTZ;
    CREATE INDEX idx_analyses_queue ON analyses (created_at) WHERE status = 'running';
    CREATE TABLE analysis_results (
        analysis_id UUID NOT NULL REFERENCES analyses (analysis_id) ON DELETE CASCADE,
        agent_id VARCHAR(128) NOT NULL,
        agent_type VARCHAR(128) NOT NULL,
        status VARCHAR(32) NOT NULL,
        result JSONB,
        steps TEXT[] NOT NULL DEFAULT '{}',
        finished_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        PRIMARY KEY (analysis_id, agent_id)
    );
    CREATE TABLE analysis_events (
        id BIGSERIAL PRIMARY KEY,
        analysis_id UUID NOT NULL REFERENCES analyses (analysis_id) ON DELETE CASCADE,
        at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        kind VARCHAR(32) NOT NULL,
        by TEXT,
        detail JSONB
    );
    CREATE INDEX idx_events_analysis ON analysis_events (analysis_id, id);
    CREATE TABLE step_intents (
        step_id UUID PRIMARY KEY,
        analysis_id UUID NOT NULL REFERENCES analyses (analysis_id) ON DELETE CASCADE,
        agent_id VARCHAR(128) NOT NULL,
        agent_type VARCHAR(128) NOT NULL,
        step_key TEXT NOT NULL,
        fn TEXT NOT NULL,
        status VARCHAR(16) NOT NULL DEFAULT 'started',
        result JSONB,
        started_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        resolved_at TIMESTAMPTZ,
        resolved_by TEXT,
        UNIQUE (analysis_id, agent_id, step_key)
    );
    CREATE INDEX idx_step_intents_open ON step_intents (started_at) WHERE status = 'started';
    CREATE TABLE reviews (
        review_id UUID PRIMARY KEY,
        analysis_id UUID NOT NULL REFERENCES analyses (analysis_id) ON DELETE CASCADE,
        agent_id VARCHAR(128) NOT NULL,
        agent_type VARCHAR(128) NOT NULL,
        step_key TEXT NOT NULL,
        kind VARCHAR(128) NOT NULL,
        payload JSONB NOT NULL,
        deadline TIMESTAMPTZ,
        on_deadline VARCHAR(16) NOT NULL,
        status VARCHAR(16) NOT NULL DEFAULT 'pending',
        decision JSONB,
        decided_by TEXT,
        decided_at TIMESTAMPTZ,
        created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
        UNIQUE (analysis_id, agent_id, step_key)
    );
    CREATE INDEX idx_reviews_pending ON reviews (deadline) WHERE status = 'pending';
    """,
    # 8: fencing tokens. every claim of an analysis draws a number from one sequence, so
    #    a later run always holds a higher token than an earlier one; Redis scripts refuse
    #    a working-memory write whose token is below the agent's fence.
    """
    CREATE SEQUENCE amber_lease_tokens;
    ALTER TABLE analyses ADD COLUMN lease_token BIGINT;
    """,
    # 9: one review queue. the sessions-and-tasks module's reviews (of a task, under a key
    #    prefix, gone at expires_at) join the reviews analyses wait for: a scope ('' for an
    #    analysis's review, else the module's prefix) makes the key with the review's id,
    #    which that module lets its callers choose.
    """
    ALTER TABLE reviews DROP CONSTRAINT reviews_pkey;
    ALTER TABLE reviews ALTER COLUMN review_id TYPE VARCHAR(128) USING review_id::text;
    ALTER TABLE reviews ADD COLUMN scope VARCHAR(128) NOT NULL DEFAULT '';
    ALTER TABLE reviews ADD PRIMARY KEY (scope, review_id);
    CREATE INDEX idx_reviews_id ON reviews (review_id);
    ALTER TABLE reviews
        ALTER COLUMN analysis_id DROP NOT NULL,
        ALTER COLUMN agent_id DROP NOT NULL,
        ALTER COLUMN agent_type DROP NOT NULL,
        ALTER COLUMN step_key DROP NOT NULL,
        ALTER COLUMN kind DROP NOT NULL,
        ALTER COLUMN on_deadline DROP NOT NULL,
        ADD COLUMN task_id VARCHAR(128),
        ADD COLUMN confidence DOUBLE PRECISION,
        ADD CONSTRAINT reviews_of_an_analysis_or_a_task
            CHECK ((scope = '') = (analysis_id IS NOT NULL));
    """,
    # 10: a checkpoint's blobs are zstd already and its step lists grow with a long run:
    #     stored out of line without PostgreSQL trying to compress them again at every save.
    """
    ALTER TABLE agent_checkpoints
        ALTER COLUMN state SET STORAGE EXTERNAL,
        ALTER COLUMN l1_snapshot SET STORAGE EXTERNAL,
        ALTER COLUMN completed_subtasks SET STORAGE EXTERNAL,
        ALTER COLUMN pending_subtasks SET STORAGE EXTERNAL;
    """,
    # 11: lg_put's check that the channel versions a checkpoint names are stored: its cached
    #     generic plan scanned every blob of the thread (an anti join), so a put cost more
    #     the longer the thread; now one index probe per named channel.
    """
"""
    + lg_put(True, NAMED_CHECK_V11)
    + """    """,
    # 12: which server incarnation a lease's liveness lock was seen on. A lock lives on one
    #     server: after a restart or a failover to a standby every lock is gone, and a
    #     lease whose lock is missing proves its process dead only where that lock was
    #     held. Leases of another incarnation lapse when they expire, unless renewed.
    """
    ALTER TABLE analyses ADD COLUMN lease_server TEXT;
    """,
    # 13: the workers alive now and the agent names each one's app registers, so an
    #     analysis no live worker can run says so instead of waiting in silence.
    """
    CREATE TABLE amber_workers (
        name TEXT PRIMARY KEY,
        app TEXT NOT NULL,
        agent_types TEXT[] NOT NULL,
        lock_key BIGINT NOT NULL,
        seen_at TIMESTAMPTZ NOT NULL DEFAULT NOW()
    );
    """,
    # 14: lg_put with a witness: a put whose unchanged channels are those of a checkpoint
    #     the caller wrote or read names that checkpoint, and one probe of it replaces the
    #     probe per channel (80 of lg_put's 195 us on a 10-channel put). Migration 11's
    #     lg_put stays for processes of the version before.
    """
"""
    + lg_put(False, WITNESSED_CHECK_V14, witness=True)
    + """    """,
    # 15: delta records (checkpoints/delta.py): a row whose ``state`` holds only what
    #     changed since an earlier whole row of its agent names that row's ``seq`` in
    #     ``state_base``, and its ``completed_subtasks`` are those done after the base's.
    """
    ALTER TABLE agent_checkpoints ADD COLUMN state_base BIGINT;
    ALTER TABLE agent_checkpoints_archive ADD COLUMN state_base BIGINT;
    """,
    # 16: a row stays whole in its page up to half a page (4,080 bytes in 8 KB pages, two
    #     rows a page). From 2 KB (the default) its blobs went out of line, and a save
    #     with 5 of 100 keys changed (a 2 to 3 KB row) wrote a TOAST row and its index
    #     entry beside its own: 12.9 WAL records a save against 10.9 (pg_waldump over 500
    #     saves), and a restore read them back. Larger rows (a whole snapshot, a long
    #     run's step lists) still go out of line; up to a whole page they would take a
    #     page each, half of it empty.
    """
    DO $$ BEGIN
        EXECUTE format('ALTER TABLE agent_checkpoints SET (toast_tuple_target = %s)',
                       (current_setting('block_size')::int - 32) / 2);
    END $$;
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
    # the common case, a database already at this version: one read, no lock taken
    if schema_version(pool, table) == len(steps):
        return applied
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
