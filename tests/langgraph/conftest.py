"""Savers on the suite's servers, and an adapter that runs async callers on the sync saver."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

import amber
from amber.langgraph import AmberSaver, AsyncAmberSaver


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
