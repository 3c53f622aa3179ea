"""Named defaults, one line of meaning each. ``amber.config.Settings`` reads overrides."""

from __future__ import annotations

HOUR = 3600
DAY = 24 * HOUR

DATA_DIR = ".amber"
"""Where embedded servers, WAL segments and checkpoint files live."""

PREFIX = "amber"
"""First part of every Redis key; isolates deployments and test runs sharing one Redis."""

ACTIVE_TTL = 24 * HOUR
"""Lifetime of an active agent's working memory keys (DD-016)."""

PAUSED_TTL = 14 * DAY
"""Lifetime of working memory, snapshots and backups while an analysis is paused."""

CHECKPOINT_BACKUP_TTL = 7 * DAY
"""Lifetime of the Redis backup of a checkpoint (DD-011)."""

SNAPSHOT_TTL = 14 * DAY
"""Lifetime of the latest L1 snapshot in the Redis secondary (DD-016)."""

FAILED_RETENTION = 30 * DAY
"""How long checkpoints of a failed analysis are kept (DD-011)."""

DURABILITY = "checkpoint"
"""Default durability mode: every checkpoint commits the working memory's changes to
PostgreSQL too, so a Redis loss costs at most the step in flight."""

ON_MEMORY_LOST = "rollback"
"""When the memory of an agent's newest checkpoint cannot be rebuilt: roll back to the
newest checkpoint whose memory can be (``pause``: stop and say so instead)."""

CONNECT_TIMEOUT = 1.0
"""Seconds a server has to accept a connection and answer a first command before
StoreUnavailable (PostgreSQL's own startup is given libpq's minimum of 2 s)."""

COMMAND_TIMEOUT = 30.0
"""Seconds one command may take once connected (long Lua scripts, big snapshots)."""

REDIS_RETRY_SECONDS = 10.0
"""Seconds a Redis command that failed transiently (failover, ``CLUSTERDOWN``) is retried
when retrying cannot apply it twice (``amber.engines.retry``)."""

TIMEOUT_MAX = 24 * HOUR
"""Longest connect or command timeout a setting accepts."""

REDIS_MAX_CONNECTIONS = 10_000
"""Most connections one Redis client opens (redis-py's own cap, 100, is below what a
worker's threads can use at once; a connection is taken per command, so few are open)."""

PG_POOL_MAX = 8
"""Most PostgreSQL connections one stack opens."""

PG_RECONNECT_SECONDS = 5.0
"""Seconds the PostgreSQL pool keeps retrying one lost connection in the background
before it gives up and leaves the next caller to connect afresh. psycopg's pool doubles
its delay between tries without a cap, so after a long outage its next try could come
minutes after the server is back; bounding the tries bounds that wait."""

LEASE_SECONDS = 10.0
"""Seconds a run's lease on an analysis lasts unless renewed (every third of it, by one
heartbeat per process). A dead process's leases lapse sooner: when PostgreSQL frees its
liveness lock."""

STUCK_FACTOR = 6
"""Leases a run whose process is alive (its liveness lock held) may go without renewing
before another worker takes the analysis over, reporting it stuck (60 s for the default
10 s lease; ``AMBER_STUCK_SECONDS`` sets it in seconds). A process
that died loses its leases at once; a live one that holds the GIL in a long C call, or is
frozen (SIGSTOP, a paused VM), keeps them this long, so a long step is never run twice at
once by two live workers taking it from each other."""

WORKER_CONCURRENCY = 4
"""Analyses one worker process runs at once."""

AGENT_CONCURRENCY = 4
"""Agents of one analysis run at once (each agent's steps in order)."""

WORKER_POLL = 0.5
"""Seconds an idle worker waits before looking for work again."""

RUNNER_GONE_WAIT = 1.0
"""Seconds a pause or resume waits for a runner's lock after its process died (PostgreSQL
frees it when it sees the connection close)."""

MAX_RETRIES = 3
"""Times the coordinator retries a failing subtask before a failure checkpoint."""

TTL_MAX = 100 * 365 * DAY
"""Longest TTL or retention a setting accepts (a century: in effect, forever)."""

# -- input limits: what amber accepts from callers, checked by ``amber.keys`` ---------------
ID_MAX_LEN = 128
"""Longest agent id, agent type or other identifier (``VARCHAR(128)`` columns)."""

KEY_MAX_LEN = 512
"""Longest L1 key name."""

TICKER_MAX_LEN = 32
"""Longest stock ticker (``stock_ticker VARCHAR(32)``)."""

VERSION_MAX_LEN = 20
"""Longest agent version (``agent_version VARCHAR(20)``)."""

SUBTASK_MAX_LEN = 128
"""Longest subtask name (``current_subtask VARCHAR(128)``)."""

REASON_MAX_LEN = 1_000
"""Longest pause reason, and longest name of who paused or resumed."""

COMMENT_MAX_LEN = 10_000
"""Longest comment a reviewer may leave with a decision (persistence module)."""

STATUS_MAX_LEN = 64
"""Longest session status and task type (persistence module)."""

URL_MAX_LEN = 4_096
"""Longest Redis or PostgreSQL URL a setting accepts."""

DOCUMENT_MAX_BYTES = 64 * 1024 * 1024
"""Largest session, task or review document, as stored JSON (persistence module)."""

INT_MAX = 2**31 - 1
"""Largest value of an ``INT`` column (``retry_count``)."""

BIGINT_MAX = 2**63 - 1
"""Largest value of a ``BIGINT`` column, and largest row limit a listing accepts."""

SEQ_MAX = BIGINT_MAX
"""Largest L1 mutation sequence (``l1_snapshot_seq BIGINT``)."""

SESSION_TTL = 24 * HOUR
"""Lifetime of a stored session, renewed by every save (persistence module)."""

TASK_TTL = 24 * HOUR
"""Lifetime of a stored task and of its session's task queue (persistence module)."""

REVIEW_TTL = 24 * HOUR
"""How long a review waits when it is saved without ``expires_at``."""

WAL_FSYNC = "batch"
"""Default WAL fsync policy: group commit (``always``, ``batch`` or ``off``)."""

WAL_BATCH_ENTRIES = 100
"""Under ``batch``, entries buffered before a write and fsync (ADR-003)."""

WAL_BATCH_SECONDS = 1.0
"""Under ``batch`` and ``off``, longest time an entry waits in the buffer."""

WAL_SEGMENT_ENTRIES = 10_000
"""Entries per WAL segment file before it is closed and a new one started."""

WAL_MAX_ENTRY_BYTES = 64 * 1024 * 1024
"""Largest serialized WAL entry; a longer length prefix is read as corruption."""

CHECKPOINT_INTERVAL = 300.0
"""Seconds between periodic StateStore checkpoints (checked on each log)."""

CHECKPOINT_ENTRIES = 10_000
"""WAL entries since the last checkpoint that trigger a new one."""

CHECKPOINT_RETENTION = 24 * HOUR
"""Age after which a checkpoint file may be deleted."""

CHECKPOINT_KEEP = 2
"""Checkpoint files always kept, however old."""

CHECKPOINT_ZSTD_LEVEL = 3
"""zstd level of checkpoint bodies; chosen by bench/bench_wal.py (see docs/wal.md)."""

WORKER_LIVE_SECONDS = 15.0
"""Seconds a worker counts as alive after it last said so (it says so every few seconds):
what decides whether an analysis's agent is registered by a live worker."""

WORKER_SEEN_EVERY = 3.0
"""Seconds between a worker's notes that it is alive."""
