"""Savers on the suite's servers, and an adapter that runs async callers on the sync saver."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import psycopg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from psycopg.conninfo import make_conninfo

import amber
from amber.langgraph import AmberSaver, AsyncAmberSaver

from ..conftest import Engines, delete_prefix


class SyncAsAsync(BaseCheckpointSaver[str]):
    """The async API over a sync saver's methods, called inline: LangGraph's conformance
    suite only calls async methods, and this way it exercises the sync code paths."""

    def __init__(self, saver: AmberSaver) -> None:
        super().__init__(serde=saver.serde)
        self.saver = saver

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.saver.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.saver.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.saver.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.saver.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.saver.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.saver.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self.saver.get_next_version(current, channel)


@pytest.fixture
def saver(stack: amber.Stack) -> AmberSaver:
    return AmberSaver(stack)


@pytest.fixture
def async_saver(stack: amber.Stack) -> AsyncAmberSaver:
    return AsyncAmberSaver(stack)


@pytest.fixture
def private_stack(engines: Engines) -> Iterator[amber.Stack]:
    """A stack on a database and key prefix of its own, for tests that sweep every thread
    (``gc``): they must not touch what other tests created. Removed afterwards."""
    run = uuid.uuid4().hex[:10]
    dbname, prefix = f"amber_lg_{run}", f"amber-lg-{run}"
    with psycopg.connect(engines.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    try:
        url = make_conninfo(engines.admin_url, dbname=dbname)
        with amber.connect(engines.redis_url, url, prefix=prefix) as stack:
            yield stack
        delete_prefix(engines.redis_url, prefix)  # after the copies left to write
    finally:
        with psycopg.connect(engines.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


class Chain:
    """Checkpoints of one thread and namespace, each continuing from the last (as a graph
    run puts them): ``step(a=1)`` sets channel ``a`` to 1 with a new version."""

    def __init__(self, saver: BaseCheckpointSaver[str], thread_id: str, ns: str = "") -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.ns = ns
        self.values: dict[str, Any] = {}
        self.versions: dict[str, str] = {}
        self.config: RunnableConfig = self.latest
        self.ids: list[str] = []

    @property
    def latest(self) -> RunnableConfig:
        """The config naming this namespace's newest checkpoint (no checkpoint id)."""
        return {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": self.ns}}

    def step(self, metadata: dict[str, Any] | None = None, **changes: Any) -> RunnableConfig:
        """Put a checkpoint with ``changes`` applied; returns its config."""
        for name, value in changes.items():
            self.values[name] = value
            self.versions[name] = self.saver.get_next_version(self.versions.get(name), None)
        cp = generate_checkpoint(
            channel_values=dict(self.values), channel_versions=dict(self.versions)
        )
        md = {"source": "loop", "step": len(self.ids), "parents": {}, **(metadata or {})}
        new = {k: self.versions[k] for k in changes}
        self.config = self.saver.put(self.config, cp, md, new)  # type: ignore[arg-type]
        self.ids.append(cp["id"])
        return self.config


def from_postgresql(stack: amber.Stack, config: RunnableConfig) -> Any:
    """``get_tuple`` as a process holding no copy would, with Redis's copy dropped and not
    consulted (a copy written behind a put may land at any time): from PostgreSQL alone."""
    stack.redis.delete(stack.keys.lg_heads(config["configurable"]["thread_id"]))
    reader = AmberSaver(stack)
    reader._core._load_hot = lambda at: None  # type: ignore[method-assign]
    return reader.get_tuple(config)
