"""Operations that span slots, cut off half-way as a crash would: what they leave is
harmless. Each plan runs its first calls on real Redis and is then dropped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from amber.persistence import SyncPersistenceManager, ValidationError
from amber.persistence.calls import Done, Plan, advance
from amber.persistence.core import Core

from ..conftest import Engines
from .conftest import session, task


@pytest.fixture
def spm(engines: Engines, prefix: str) -> Iterator[SyncPersistenceManager]:
    with SyncPersistenceManager(engines.redis_url, prefix=prefix) as opened:
        yield opened


def cut(pm: SyncPersistenceManager, plan: Plan[Any], after: int) -> list[str]:
    """Run the first ``after`` calls of ``plan``, then drop it; the scripts it ran."""
    ran = []
    step = advance(plan, None)
    for _ in range(after):
        assert not isinstance(step, Done)
        ran.append(getattr(step, "script", type(step).__name__))
        step = advance(plan, step.send(pm.redis, pm._scripts))
    plan.close()
    return ran


def test_a_save_cut_after_the_index_entry_lists_nothing(  # two steps as on a cluster
    spm: SyncPersistenceManager, raw: redis.Redis
) -> None:
    core = Core(spm.keys, spm.core.session_ttl_ms, spm.core.task_ttl_ms, cluster=True)
    assert cut(spm, core.save_session(session("s1")), 1) == ["index_session"]
    assert raw.zscore(spm.keys.session_index(), "s1") is not None
    assert spm.get_session("s1") is None
    assert spm.list_sessions() == []  # the entry without a document is skipped
    spm.save_session(session("s1"))
    assert [s.session_id for s in spm.list_sessions()] == ["s1"]


def test_a_task_save_cut_after_the_lookup_leaves_no_task(
    spm: SyncPersistenceManager, raw: redis.Redis
) -> None:
    spm.save_session(session("s1"))
    spm.save_session(session("s2"))
    assert cut(spm, spm.core.save_task(task("t1"), "s1"), 1) == ["claim_task"]
    assert raw.get(spm.keys.task_session("t1")) == b"s1"
    assert spm.get_task("t1") is None
    assert spm.list_tasks("s1") == [] and spm.next_task("s1") is None
    stored = spm.save_task(task("t1"), "s2")  # s1 never held it: s2 may take the id
    assert spm.get_task("t1") == stored
    with pytest.raises(ValidationError, match="already belongs to session 's2'"):
        spm.save_task(task("t1"), "s1")


@pytest.mark.parametrize("after", [2, 3])
def test_a_delete_cut_after_the_documents_leaves_only_what_reads_as_gone(
    spm: SyncPersistenceManager, raw: redis.Redis, after: int
) -> None:
    spm.save_session(session("s1"))
    spm.save_session(session("keep"))
    spm.save_task(task("t1"), "s1")
    spm.save_task(task("t2"), "s1")
    ran = cut(spm, spm.core.delete_session("s1"), after)
    assert ran[:2] == ["Score", "delete_session"]
    assert raw.zscore(spm.keys.session_index(), "s1") is not None  # not unindexed yet
    assert spm.get_session("s1") is None
    assert [spm.get_task(t) for t in ("t1", "t2")] == [None, None]
    assert [s.session_id for s in spm.list_sessions()] == ["keep"]
    spm.save_session(session("s1"))  # the id can be used again, its old tasks stay gone
    assert spm.list_tasks("s1") == [] and spm.get_task("t1") is None
    spm.save_task(task("t1"), "s1")
    assert [t.id for t in spm.list_tasks("s1")] == ["t1"]
