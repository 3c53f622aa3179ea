"""LangGraph's official checkpointer conformance suite (langgraph-checkpoint-conformance
0.0.2, 81 tests: base and extended capabilities) against both savers, all of it."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
    Capability,
)
from langgraph.checkpoint.conformance.initializer import RegisteredCheckpointer
from langgraph.checkpoint.conformance.spec import (
    test_copy_thread,
    test_delete_for_runs,
    test_delete_thread,
    test_get_tuple,
    test_list,
    test_prune,
    test_put,
    test_put_writes,
)

import amber
from amber.langgraph import AmberSaver, AsyncAmberSaver

from .conftest import SyncAsAsync

SPEC = {
    Capability.PUT: test_put.ALL_PUT_TESTS,
    Capability.PUT_WRITES: test_put_writes.ALL_PUT_WRITES_TESTS,
    Capability.GET_TUPLE: test_get_tuple.ALL_GET_TUPLE_TESTS,
    Capability.LIST: test_list.ALL_LIST_TESTS,
    Capability.DELETE_THREAD: test_delete_thread.ALL_DELETE_THREAD_TESTS,
    Capability.DELETE_FOR_RUNS: test_delete_for_runs.ALL_DELETE_FOR_RUNS_TESTS,
    Capability.COPY_THREAD: test_copy_thread.ALL_COPY_THREAD_TESTS,
    Capability.PRUNE: test_prune.ALL_PRUNE_TESTS,
}


def test_the_suite_is_the_81_test_release() -> None:
    assert set(SPEC) == BASE_CAPABILITIES | EXTENDED_CAPABILITIES
    assert sum(len(tests) for tests in SPEC.values()) == 81


def registered(stack: amber.Stack, kind: str) -> RegisteredCheckpointer:
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[str], None]:
        if kind == "AsyncAmberSaver":
            yield AsyncAmberSaver(stack)
        else:
            yield SyncAsAsync(AmberSaver(stack))

    return RegisteredCheckpointer(name=kind, factory=factory)


@pytest.mark.parametrize("capability", list(SPEC), ids=lambda c: c.value)
@pytest.mark.parametrize("kind", ["AsyncAmberSaver", "AmberSaver"])
async def test_conformance(stack: amber.Stack, kind: str, capability: Capability) -> None:
    report = await validate(registered(stack, kind), capabilities={capability.value})
    result = report.results[capability.value]
    assert result.detected, f"{kind} does not implement {capability.value}"
    assert result.failures == [], result.failures
    assert (result.tests_passed, result.tests_failed) == (len(SPEC[capability]), 0)
