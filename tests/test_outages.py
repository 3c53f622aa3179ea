"""A server that goes away mid-work is a clear StoreUnavailable, and loses nothing stored."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import amber
from amber import StoreUnavailable, defaults
from amber.engines.embedded import EmbeddedPostgres, EmbeddedRedis

from .checkpoints.test_checkpointer import Probe
from .conftest import Engines


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[EmbeddedRedis, EmbeddedPostgres]]:
    r, p = EmbeddedRedis(tmp_path), EmbeddedPostgres(tmp_path)
    r.ensure()
    p.ensure()
    yield r, p
    r.stop()
    p.stop()


def test_postgres_outage_then_return(own: tuple[EmbeddedRedis, EmbeddedPostgres]) -> None:
    redis_server, pg_server = own
    # a later call during the outage waits command_timeout for a connection, then fails
    with amber.connect(
        redis_server.url, pg_server.url(), connect_timeout=2, command_timeout=4
    ) as stack:
        agent = Probe(str(uuid.uuid4()), "AAPL", stack.memory("outage-agent"))
        agent.complete("one", agent.run_subtask("one"))
        saved = stack.checkpointer.save_checkpoint(agent, "one")
        pg_server.stop()
        down_at = time.monotonic()
        # the pooled connection the stop cut is found before use, and the server asked:
        # it does not answer, so the save fails then, not after command_timeout
        with pytest.raises(StoreUnavailable, match="PostgreSQL did not answer"):
            stack.checkpointer.save_checkpoint(agent, "two")
        with pytest.raises(StoreUnavailable):
            stack.analyses.list()
        # PostgreSQL is the authority: without it no Redis copy can be proved current
        with pytest.raises(StoreUnavailable):
            stack.checkpointer.restore_checkpoint(
                agent.analysis_id, "probe_agent", agent_id=agent.agent_id
            )
        # the working memory's Redis secondary is still restored from (tried first, while
        # PostgreSQL's chain is asked for): the call that reaches PostgreSQL says it is down
        agent.l1_cache.clear()
        report = stack.restorer.restore_from_snapshot(
            agent.agent_id, agent.analysis_id, "probe_agent"
        )
        assert report is not None and report.source == "redis_secondary"
        # a recovery without a mark keeps that memory: PostgreSQL's newest is not known
        recovered = stack.recovery.recover_agent_state(
            agent.agent_id, agent.analysis_id, "probe_agent"
        )
        assert recovered.path == "l1_existing"
        # psycopg's pool retries a lost connection after 1, 2, 4, 8, 16 s...: an outage of
        # 17 s puts its next try 14 s after the server is back, unless amber bounds the
        # tries (PG_RECONNECT_SECONDS) so that the next call connects afresh
        time.sleep(max(0.0, down_at + 17 - time.monotonic()))
        pg_server.ensure()
        deadline = time.monotonic() + 2 * defaults.PG_RECONNECT_SECONDS
        while True:
            try:
                assert stack.checkpointer.get(saved.checkpoint_id) == saved
                break
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        restored = stack.checkpointer.restore_checkpoint(
            agent.analysis_id, "probe_agent", agent_id=agent.agent_id
        )
        # the failed save of "two" sent nothing (its connection was found cut before the
        # insert went out): Redis's copy is checkpoint one's, which PostgreSQL names newest
        assert restored.checkpoint == saved and restored.source == "redis_backup"


def test_redis_outage_is_clear(
    own: tuple[EmbeddedRedis, EmbeddedPostgres], engines: Engines
) -> None:
    redis_server, pg_server = own
    with amber.connect(redis_server.url, pg_server.url(), connect_timeout=1) as stack:
        mem = stack.memory("outage-agent")
        mem.set("k", "v")
        redis_server.stop()
        with pytest.raises(StoreUnavailable):
            mem.set("k", "w")
        with pytest.raises(StoreUnavailable):
            stack.snapshotter.take("outage-agent")


def test_redis_refusing_the_backup_never_leaves_an_older_one_trusted(
    own: tuple[EmbeddedRedis, EmbeddedPostgres],
) -> None:
    redis_server, pg_server = own
    with amber.connect(redis_server.url, pg_server.url(), connect_timeout=2) as stack:
        agent = Probe(str(uuid.uuid4()), "AAPL", stack.memory("oom-agent"))
        agent.complete("one", agent.run_subtask("one"))
        stack.checkpointer.save_checkpoint(agent, "one")
        agent.complete("two", agent.run_subtask("two"))
        stack.redis.config_set("maxmemory", 1)  # Redis now refuses writes (OOM)
        try:
            with pytest.raises(StoreUnavailable, match="is in PostgreSQL"):
                stack.checkpointer.save_checkpoint(agent, "two")
        finally:
            stack.redis.config_set("maxmemory", 0)
        restored = stack.checkpointer.restore_checkpoint(
            agent.analysis_id, "probe_agent", agent_id=agent.agent_id
        )
        assert restored.source == "postgresql"  # the older backup is not the newest row
        assert restored.checkpoint.completed_subtasks == ["one", "two"]
