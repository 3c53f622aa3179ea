"""``AmberSaver`` and ``AsyncAmberSaver``: LangGraph checkpointers on amber.

Both are shells over one ``SaverCore`` (``core.py``) and one ``Retention``
(``retention.py``); the async saver runs the same sync code in a worker thread.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from amber.engines.aio import in_thread
from amber.langgraph.core import CACHE_BYTES, SaverCore
from amber.langgraph.owned import OwnsStack, on_own_stack
from amber.langgraph.retention import GcReport, Retention
from amber.langgraph.serde import AllowedType, StrictSerializer
from amber.stack import Stack


class AmberSaver(OwnsStack, BaseCheckpointSaver[str]):
    """LangGraph checkpointer: PostgreSQL is the authority, Redis holds a verified hot copy of
    each namespace's newest checkpoint, every stored row is checksummed, nothing is pickled.

    ``AmberSaver(stack)`` uses an open stack (``amber.connect()``); ``AmberSaver.from_env()``
    opens and owns one. ``ttl`` (seconds) is every thread's default time to live, renewed by
    each put and enforced by :meth:`gc`; ``allowed_types`` are the classes (or
    ``(module, name)`` pairs) beyond LangGraph's safe ones that stored values may rebuild.
    """

    serde: StrictSerializer

    def __init__(
        self,
        stack: Stack,
        *,
        ttl: float | None = None,
        allowed_types: Iterable[AllowedType] = (),
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        super().__init__(serde=StrictSerializer(allowed_types))
        self._core = SaverCore(
            stack.redis,
            stack.pg,
            stack.keys,
            hot_ttl_s=stack.settings.checkpoint_backup_ttl,
            ttl_s=ttl,
            cache_bytes=cache_bytes,
        )
        self._retention = Retention(
            stack.redis, stack.pg, stack.keys, self._core.cache, self._core.hot, ttl
        )

    @classmethod
    def from_env(
        cls,
        *,
        ttl: float | None = None,
        allowed_types: Iterable[AllowedType] = (),
        **connect_args: Any,
    ) -> AmberSaver:
        """A saver on a stack it opens as ``amber.connect(**connect_args)`` does (``AMBER_*``
        variables, else embedded servers) and closes with :meth:`close`."""
        return on_own_stack(lambda s: cls(s, ttl=ttl, allowed_types=allowed_types), connect_args)

    def close(self) -> None:
        """Write the hot copies left to write behind, then close the stack if this saver
        opened it."""
        self._core.hot.flush()
        super().close()

    def setup(self) -> None:
        """Nothing to do: amber applies its migrations when the stack connects. Kept so code
        written for ``PostgresSaver`` runs unchanged."""

    def with_allowlist(self, extra_allowlist: Iterable[tuple[str, ...]]) -> AmberSaver:
        """A saver sharing this one's connections whose decoder also rebuilds these types
        (LangGraph calls it with a graph's state types under ``LANGGRAPH_STRICT_MSGPACK``)."""
        clone = copy.copy(self)
        clone.serde = self.serde.with_allowlist(extra_allowlist)
        return clone

    # -- BaseCheckpointSaver ---------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or its namespace's newest; None if there is none."""
        return self._core.get_tuple(self.serde, config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of a thread (and namespace, if the config names one),
        whose metadata contains ``filter``, older than ``before``, at most ``limit``."""
        for page in self._core.pages(self.serde, config, filter=filter, before=before, limit=limit):
            yield from page

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (the channel values whose version is new, and its row); returns
        the config that names it. Done when PostgreSQL has committed."""
        return self._core.put(self.serde, config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint ``config`` names."""
        self._core.put_writes(self.serde, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread, in every namespace."""
        self._retention.delete_threads([thread_id])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of these runs."""
        self._retention.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another."""
        self._retention.copy_thread(source_thread_id, target_thread_id)

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """``keep_latest``: keep each namespace's newest ``keep`` checkpoints (and what they
        need); ``delete``: delete the threads. Refuses threads that use a ``DeltaChannel``."""
        self._retention.prune(thread_ids, strategy, keep)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The version after ``current``: a counter with a random fraction, so two branches
        forked from one checkpoint never give one channel the same version."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- retention beyond LangGraph's API ----------------------------------------------------
    def set_ttl(self, thread_id: str, seconds: float | None) -> None:
        """Give a thread its own time to live (renewed by each put); None: the saver's."""
        self._retention.set_ttl(thread_id, seconds)

    def gc(
        self, *, keep_latest: int | None = None, thread_ids: Sequence[str] | None = None
    ) -> GcReport:
        """Delete expired threads, prune every thread to its newest ``keep_latest``
        checkpoints per namespace, drop writes and values no checkpoint needs; only the
        threads named, if ``thread_ids`` is given."""
        return self._retention.gc(keep_latest, thread_ids)


class AsyncAmberSaver(AmberSaver):
    """``AmberSaver`` with LangGraph's async methods too, running the same code in a worker
    thread (for ``ainvoke``/``astream``)."""

    @classmethod
    def from_env(
        cls,
        *,
        ttl: float | None = None,
        allowed_types: Iterable[AllowedType] = (),
        **connect_args: Any,
    ) -> AsyncAmberSaver:
        """As :meth:`AmberSaver.from_env`."""
        return cast(
            AsyncAmberSaver,
            super().from_env(ttl=ttl, allowed_types=allowed_types, **connect_args),
        )

    async def __aenter__(self) -> AsyncAmberSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """As :meth:`AmberSaver.list`, a page per worker-thread call."""
        pages = self._core.pages(self.serde, config, filter=filter, before=before, limit=limit)
        while (page := await asyncio.to_thread(next, pages, None)) is not None:
            for item in page:
                yield item

    aget_tuple = in_thread(AmberSaver.get_tuple)
    aput = in_thread(AmberSaver.put)
    aput_writes = in_thread(AmberSaver.put_writes)
    adelete_thread = in_thread(AmberSaver.delete_thread)
    adelete_for_runs = in_thread(AmberSaver.delete_for_runs)
    acopy_thread = in_thread(AmberSaver.copy_thread)
    aprune = in_thread(AmberSaver.prune)
    agc = in_thread(AmberSaver.gc)


__all__ = ["AmberSaver", "AsyncAmberSaver"]
