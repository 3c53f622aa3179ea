"""Retention: prune keeping the newest N, TTLs per thread, gc, and never deleting what a
namespace's newest checkpoint needs (its values, its writes, writes still being saved)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import amber
from amber.errors import NotSupported
from amber.langgraph import AmberSaver

from .conftest import Chain, from_postgresql, generate_checkpoint

ID = Callable[[str], str]


def count(stack: amber.Stack, table: str, thread_id: str) -> int:
    with stack.pg.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", (thread_id,))
        return int(row.fetchone()[0])  # type: ignore[index]


def cold(stack: amber.Stack, saver: AmberSaver, config: Any) -> Any:
    """``get_tuple`` from PostgreSQL alone."""
    return from_postgresql(stack, config)


def test_prune_keeps_the_newest_n_per_namespace_and_all_they_need(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    tid = uid("t")
    chains = [Chain(saver, tid), Chain(saver, tid, "child:1")]
    for chain in chains:
        for i in range(6):
            changes: dict[str, Any] = {"a": i} if i % 2 else {"b": i}
            if i < 2:
                changes["c"] = f"c{i}"  # then unchanged: every later checkpoint needs c@2
            config = chain.step(**changes)
            saver.put_writes(config, [("a", f"w{i}")], f"task-{i}")
    saver.prune([tid], strategy="keep_latest", keep=3)
    for chain in chains:
        kept = list(saver.list(chain.latest))
        assert [t.checkpoint["id"] for t in kept] == chain.ids[:2:-1]
        for t, i in zip(kept, (5, 4, 3), strict=True):
            assert t.pending_writes == [(f"task-{i}", "a", f"w{i}")]
            got = cold(stack, saver, t.config)
            assert got.checkpoint["channel_values"] == t.checkpoint["channel_values"]
    # values no kept checkpoint names are gone: per namespace, of the 8 versions stored
    # (a 3, b 3, c 2) the kept ones name a@2,3 b@2,3 and c@2
    assert count(stack, "lg_blobs", tid) == 2 * 5
    assert count(stack, "lg_writes", tid) == 2 * 3


def test_a_fork_from_a_pruned_checkpoint_stores_the_values_it_needs_again(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"))
    first = chain.step(a="a1", b="b1")
    chain.step(a="a2", b="b2")
    old = saver.get_tuple(first)  # a run reads an old checkpoint to fork from it ...
    assert old is not None
    saver.prune([chain.thread_id], strategy="keep_latest")  # ... which is pruned meanwhile
    assert count(stack, "lg_blobs", chain.thread_id) == 2
    fork = dict(old.checkpoint)
    fork["id"] = "1f" + "f" * 6 + old.checkpoint["id"][8:]
    fork["channel_values"] = {"a": "a3", "b": "b1"}  # b unchanged since the pruned one
    fork["channel_versions"] = {**old.checkpoint["channel_versions"], "a": "9"}
    config = saver.put(first, fork, {"source": "fork", "step": 9}, {"a": "9"})  # type: ignore[arg-type]
    got = cold(stack, saver, config)
    assert got.checkpoint["channel_values"] == {"a": "a3", "b": "b1"}
    assert got.parent_config["configurable"]["checkpoint_id"] == chain.ids[0]


@pytest.mark.parametrize("gone", ["pruned", "put over"])
def test_a_put_whose_held_checkpoint_is_gone_stores_the_values_it_names_again(
    stack: amber.Stack, saver: AmberSaver, uid: ID, gone: str
) -> None:
    """A put names the checkpoint this process holds as the witness that the values it only
    names are stored (one probe for all). Another process pruned that checkpoint, or put
    another one over its id: the witness fails, and the values are checked one by one."""
    chain = Chain(saver, uid("t"))
    chain.step(a="a1", b="b1")  # held by this process: the next put's witness
    other = AmberSaver(stack)  # another process: its own copies
    if gone == "pruned":
        Chain(other, chain.thread_id).step(a="x", b="y")  # newer: the held one is pruned
    else:
        over = generate_checkpoint(channel_values={"a": "x", "b": "y"},
                                   channel_versions={"a": "7", "b": "7"})  # fmt: skip
        over["id"] = chain.ids[0]
        other.put(chain.latest, over, {"source": "update", "step": 0, "parents": {}},
                  {"a": "7", "b": "7"})  # fmt: skip
    saver.prune([chain.thread_id], strategy="keep_latest")
    assert count(stack, "lg_blobs", chain.thread_id) == 2  # b1 is gone
    config = chain.step(a="a2")  # names b1, unchanged since the held checkpoint
    got = cold(stack, saver, config)
    assert got.checkpoint["channel_values"] == {"a": "a2", "b": "b1"}


def test_prune_refuses_threads_using_a_delta_channel(saver: AmberSaver, uid: ID) -> None:
    chain = Chain(saver, uid("t"))
    chain.step(a=1)
    chain.step(metadata={"counters_since_delta_snapshot": {"a": [1, 1]}}, a=2)
    with pytest.raises(NotSupported, match="DeltaChannel") as info:
        saver.prune([chain.thread_id])
    assert info.value.context["thread_ids"] == [chain.thread_id]
    assert len(list(saver.list(chain.latest))) == 2
    saver.prune([chain.thread_id], strategy="delete")
    assert saver.get_tuple(chain.latest) is None


def test_delete_for_runs_keeps_other_runs_and_their_values(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"))
    keep, drop = uid("run"), uid("run")
    chain.step(metadata={"run_id": keep}, a=1, b=1)
    config = chain.step(metadata={"run_id": drop}, a=2)
    saver.put_writes(config, [("a", 3)], "task")
    saver.delete_for_runs([drop])
    got = saver.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["id"] == chain.ids[0]
    assert got.checkpoint["channel_values"] == {"a": 1, "b": 1}
    assert count(stack, "lg_writes", chain.thread_id) == 0
    assert count(stack, "lg_blobs", chain.thread_id) == 2


def test_a_copied_thread_verifies_and_is_independent(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    source = Chain(saver, uid("t"))
    config = source.step(a=[1, 2], b="x" * 5000)
    saver.put_writes(config, [("a", 9)], "task")
    target = uid("t")
    saver.copy_thread(source.thread_id, target)
    saver.delete_thread(source.thread_id)
    got = cold(stack, saver, {"configurable": {"thread_id": target, "checkpoint_ns": ""}})
    assert got.checkpoint["channel_values"] == {"a": [1, 2], "b": "x" * 5000}
    assert got.pending_writes == [("task", "a", 9)]


def test_gc_deletes_expired_threads_and_a_put_renews_the_ttl(private_stack: amber.Stack) -> None:
    saver = AmberSaver(private_stack)
    idle, busy, forever = Chain(saver, "idle"), Chain(saver, "busy"), Chain(saver, "forever")
    for chain in (idle, busy, forever):
        chain.step(a=1)
    saver.set_ttl("idle", 0.6)
    saver.set_ttl("busy", 0.6)
    time.sleep(0.4)
    busy.step(a=2)  # renews: expires 0.6 s from now
    time.sleep(0.4)
    report = saver.gc()
    assert report.expired_threads == 1 and report.checkpoints == 1
    assert saver.get_tuple(idle.latest) is None
    assert saver.get_tuple(busy.latest) is not None
    assert saver.get_tuple(forever.latest) is not None
    assert private_stack.redis.exists(private_stack.keys.lg_heads("idle")) == 0


def test_a_saver_default_ttl_applies_to_threads_without_their_own(
    private_stack: amber.Stack,
) -> None:
    saver = AmberSaver(private_stack, ttl=0.5)
    short, pinned = Chain(saver, "short"), Chain(saver, "pinned")
    short.step(a=1)
    pinned.step(a=1)
    saver.set_ttl("pinned", 3600)
    time.sleep(0.7)
    assert saver.gc().expired_threads == 1
    assert saver.get_tuple(short.latest) is None
    assert saver.get_tuple(pinned.latest) is not None


def test_gc_prunes_everything_and_keeps_what_the_newest_needs(
    private_stack: amber.Stack,
) -> None:
    stack, saver = private_stack, AmberSaver(private_stack)
    chains = [Chain(saver, f"t{i}") for i in range(3)]
    for chain in chains:
        for i in range(4):
            config = chain.step(a=i, b="fixed" if i else "first")
            saver.put_writes(config, [("a", i)], f"task-{i}")
    delta = Chain(saver, "delta")
    delta.step(a=1)
    delta.step(metadata={"counters_since_delta_snapshot": {"a": [1, 1]}}, a=2)
    newest = chains[0].ids[-1]
    with stack.pg.connection() as conn:  # writes of a checkpoint not yet committed, and of
        for cid in ("2" + newest[1:], "0" + newest[1:]):  # one long gone
            conn.execute(
                "INSERT INTO lg_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,"
                " channel, type, data, sha256) VALUES ('t0', '', %s, 'x', 0, 'a', 'null', '', '')",
                (cid,),
            )
    report = saver.gc(keep_latest=2)
    assert report.skipped == ("delta",)
    assert (report.checkpoints, report.writes) == (3 * 2, 3 * 2 + 1)
    for chain in chains:
        kept = list(saver.list(chain.latest))
        assert [t.checkpoint["id"] for t in kept] == chain.ids[:1:-1]
        assert cold(stack, saver, chain.latest).checkpoint["channel_values"] == {
            "a": 3,
            "b": "fixed",
        }
    with stack.pg.connection() as conn:
        left = conn.execute("SELECT checkpoint_id FROM lg_writes WHERE task_id = 'x'").fetchall()
    assert left == [("2" + newest[1:],)]
    assert len(list(saver.list(delta.latest))) == 2


def test_gc_of_named_threads_touches_no_other(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    named, other = Chain(saver, uid("t")), Chain(saver, uid("t"))
    for chain in (named, other):
        for i in range(3):
            chain.step(a=i)
        saver.set_ttl(chain.thread_id, 0.2)
    time.sleep(0.4)
    report = saver.gc(thread_ids=[named.thread_id])
    assert (report.expired_threads, report.checkpoints) == (1, 3)
    assert saver.get_tuple(named.latest) is None
    assert len(list(saver.list(other.latest))) == 3
    saver.set_ttl(other.thread_id, None)
    assert saver.gc(keep_latest=1, thread_ids=[other.thread_id]).checkpoints == 2
