"""The ``wal`` durability mode for working memory: every L1 write is logged first.

Each agent has its own write-ahead log under ``<data_dir>/wal/l1/<prefix>/<agent_id>``
(one writer per directory, so one process owns an agent's log at a time). A write is
appended to the log, then applied to Redis with the log's sequence as the agent's
sequence; a snapshot records that sequence, so recovery is the newest sound snapshot
plus a replay of every logged write after it. A Redis restart between two
checkpoints then loses nothing Redis acknowledged (within the log's fsync policy).

Retention keeps the log from the oldest snapshot a restore may fall back to: the
third newest in PostgreSQL (``PG_SNAPSHOTS_TRIED``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import redis
from psycopg_pool import ConnectionPool

from amber.keys import Keys, check_id
from amber.memory.restore import PG_SNAPSHOTS_TRIED
from amber.memory.snapshot import L1CacheSnapshotter
from amber.memory.working import VOID
from amber.schema import sql
from amber.wal import WriteAheadLog

if TYPE_CHECKING:
    from amber.memory.working import AgentMemory, Journal

L1_OP = "l1"
"""The WAL operation name of one working-memory write: data is [command, key, args]."""


class L1Journal:
    """Per-agent write-ahead logs of working-memory writes, opened on first use."""

    def __init__(self, directory: Path, fsync: str, floor: Callable[[str], int]) -> None:
        self.directory = directory
        self.fsync = fsync
        self.floor = floor
        """agent id → the highest sequence Redis or any snapshot has seen for it."""
        self._logs: dict[str, WriteAheadLog] = {}
        self._lock = threading.Lock()

    def log(self, agent_id: str) -> WriteAheadLog:
        """The agent's log, opened (and locked for this process) on first use.

        A log that lost its tail, or its directory, would hand out sequence numbers
        Redis or a snapshot already saw; it is advanced past them first, so the
        agent's sequence never runs backwards.
        """
        agent_id = check_id(agent_id, "agent_id")
        with self._lock:
            if agent_id not in self._logs:
                log = WriteAheadLog(self.directory / agent_id, fsync=self.fsync)  # type: ignore[arg-type]
                log.advance_to(self.floor(agent_id))
                self._logs[agent_id] = log
            return self._logs[agent_id]

    def journal(self, agent_id: str) -> Journal:
        """The hook ``AgentMemory`` calls before each write: log it, return its sequence.

        The log opens at the first write, so reading an agent (from any process) never
        needs it.
        """

        def append(command: str, name: str, args: list[Any]) -> int:
            return self.log(agent_id).append(L1_OP, [command, name, args])

        return append

    def replay(
        self,
        memory: Callable[[str], AgentMemory],
        agent_id: str,
        after: int,
        epoch: str | None = None,
    ) -> tuple[int, str | None]:
        """Apply every logged write after sequence ``after`` onto the incarnation
        ``epoch`` (``MemoryLost`` if Redis loses it meanwhile); (how many, epoch after)."""
        mem = memory(agent_id)
        mem.guard(epoch)
        entries = [e for e in self.log(agent_id).entries_after(after) if e.op == L1_OP]
        void = {
            int(e.data[2][0]) for e in entries if _text(e.data[0]) == VOID and e.data[2]
        }  # writes Redis refused when they were made (fenced off): never applied
        count = 0
        for entry in entries:
            command, name, args = entry.data
            if entry.seq in void or _text(command) == VOID:
                continue
            mem.replay(_text(command), _text(name), list(args), entry.seq)
            count += 1
        return count, mem.epoch

    def compact(self, agent_id: str, snapshot_seqs: list[int]) -> int:
        """Drop log segments no restore can need, given the durable snapshots' sequences
        (newest first); returns how many segment files went."""
        if len(snapshot_seqs) < PG_SNAPSHOTS_TRIED:
            return 0
        return len(self.log(agent_id).drop_through(snapshot_seqs[PG_SNAPSHOTS_TRIED - 1]))

    def release(self, agent_id: str) -> None:
        """Flush and close one agent's log, so another process may open it."""
        with self._lock:
            log = self._logs.pop(agent_id, None)
        if log is not None:
            log.close()

    def close(self) -> None:
        """Flush and close every open log."""
        with self._lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()


def sequence_floor(
    client: redis.Redis, keys: Keys, snapshotter: L1CacheSnapshotter, pool: ConnectionPool
) -> Callable[[str], int]:
    """agent id → the highest sequence Redis, the secondary or PostgreSQL has seen for it."""

    def floor(agent_id: str) -> int:
        raw = client.get(keys.l1_seq(agent_id))
        seqs = [int(cast(bytes, raw)) if raw is not None and raw.isdigit() else 0]
        meta = snapshotter.latest_meta(agent_id)
        seqs.append(meta.seq if meta else 0)
        with pool.connection() as conn:
            row = conn.execute(sql.AGENT_MAX_SNAPSHOT_SEQ, (agent_id,)).fetchone()
        seqs.append(int(row[0]) if row and row[0] is not None else 0)
        return max(seqs)

    return floor


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
