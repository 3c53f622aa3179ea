"""AmberSaver: exact round trips, the hot copy and PostgreSQL's authority, checksums on every
row, an allow-listed decoder that never builds an unknown type or unpickles, named errors."""

from __future__ import annotations

import datetime
import decimal
import os
import pickle
import threading
import time
import types
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from langgraph.checkpoint.serde import jsonplus
from langgraph.types import Interrupt, Send
from redis.backoff import NoBackoff
from redis.retry import Retry

import amber
from amber import AmberError, CheckpointCorrupt, InvalidIdentifier, InvalidValue
from amber.errors import PayloadRefused
from amber.langgraph import AmberSaver, scripts
from amber.langgraph import sql as lsql
from amber.langgraph.copies import HotWrites, Job
from amber.langgraph.records import Blob, Write

from .conftest import Chain, from_postgresql

ID = Callable[[str], str]


@dataclass
class Point:
    """A user type: rebuilt only when the application allows it."""

    x: int
    y: int


def flip_first_byte(stack: amber.Stack, table: str, column: str, where: str, *args: Any) -> None:
    with stack.pg.connection() as conn:
        n = conn.execute(
            f"UPDATE {table} SET {column} = set_byte({column}, 0, get_byte({column}, 0) # 1)"
            f" WHERE {where}",
            args,
        ).rowcount
    assert n >= 1


def test_values_of_every_langgraph_kind_round_trip_from_redis_and_postgresql(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    values = {
        "messages": [HumanMessage("hi", id="1"), AIMessage("hello", id="2")],
        "when": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "ids": {uuid.UUID(int=7), uuid.UUID(int=8)},
        "price": decimal.Decimal("10.25"),
        "raw": b"\x00\xff",
        "sends": [Send("node", {"k": 1})],
        "interrupt": Interrupt(value={"question": "ok?"}, id="i1"),
        "nested": {"a": [1, 2.5, None, "é"], "b": {"c": True}},
        "big": "x" * 50_000,
    }
    chain = Chain(saver, uid("t"))
    chain.step(**values)
    held = saver.get_tuple(chain.latest)  # the copy this process holds
    saver.close()  # the copies left to write behind are written
    hot = AmberSaver(stack).get_tuple(chain.latest)  # another process: the Redis copy
    cold = from_postgresql(stack, chain.latest)
    assert held is not None and hot is not None
    for got in (held, hot, cold):
        assert got.checkpoint["channel_values"] == values
        assert got.checkpoint["channel_versions"] == chain.versions


def test_copies_serve_the_newest_row_without_reading_its_body(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"))
    chain.step(a=1)
    chain.step(a=2, b="x")
    newest = chain.ids[-1]
    flip_first_byte(stack, "lg_checkpoints", "body", "checkpoint_id = %s", newest)
    # both copies name the row's seq, so PostgreSQL is asked for the seq, not the body
    saver.close()
    for reader in (saver, AmberSaver(stack)):  # this process's copy, then Redis's
        got = reader.get_tuple(chain.latest)
        assert got is not None and got.checkpoint["channel_values"] == {"a": 2, "b": "x"}
    with pytest.raises(CheckpointCorrupt) as info:  # without them, the damage is found
        from_postgresql(stack, chain.latest)
    assert info.value.context == {
        "thread_id": chain.thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": newest,
    }


def test_a_copy_this_process_holds_is_not_used_once_another_wrote_newer(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"))
    chain.step(a="mine")
    other = Chain(AmberSaver(stack), chain.thread_id)  # another process continues the thread
    other.config, other.values, other.versions = (
        chain.config,
        dict(chain.values),
        dict(chain.versions),
    )
    other.step(a="theirs")
    got = saver.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["channel_values"] == {"a": "theirs"}


def test_an_older_redis_copy_is_not_used_and_is_replaced(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"))
    chain.step(a="old")
    saver.close()
    key = stack.keys.lg_heads(chain.thread_id)
    older = stack.redis.hgetall(key)
    chain.step(a="new")
    saver.close()
    stack.redis.hset(key, mapping=older)  # a Redis restored from an older snapshot
    reader = AmberSaver(stack)
    got = reader.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["channel_values"] == {"a": "new"}
    reader.close()
    head = stack.redis.hget(key, "head:")
    assert head is not None and head.decode().endswith(chain.ids[-1])


def test_a_damaged_redis_copy_is_skipped_and_rewritten(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"), ns="child:1")
    chain.step(a=list(range(500)))
    saver.close()
    key = stack.keys.lg_heads(chain.thread_id)
    sealed = bytearray(stack.redis.hget(key, "copy:child:1") or b"")
    sealed[len(sealed) // 2] ^= 0x40
    stack.redis.hset(key, "copy:child:1", bytes(sealed))
    reader = AmberSaver(stack)
    got = reader.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["channel_values"] == {"a": list(range(500))}
    reader.close()
    assert stack.redis.hget(key, "copy:child:1") != bytes(sealed)


def test_one_threads_hot_copies_share_one_key_and_slot(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    tid = uid("user:42")  # a colon: the key uses a digest of it, the thread keeps its name
    for ns in ("", "child:1", "child:2|grandchild:3"):
        Chain(saver, tid, ns).step(a=ns)
    saver.close()
    keys = list(stack.redis.scan_iter(match=f"{stack.keys.prefix}:lg:*", count=1000))
    mine = [k for k in keys if k.decode() == stack.keys.lg_heads(tid)]
    assert len(mine) == 1 and len(stack.redis.hkeys(mine[0])) == 6
    got = saver.get_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": "child:1"}})
    assert got is not None and got.config["configurable"]["thread_id"] == tid


def test_every_stored_row_is_checked(stack: amber.Stack, saver: AmberSaver, uid: ID) -> None:
    chain = Chain(saver, uid("t"))
    config = chain.step(a="x" * 3000, b=[1, 2, 3])
    saver.put_writes(config, [("a", "pending")], "task-1")

    assert from_postgresql(stack, chain.latest) is not None
    flip_first_byte(stack, "lg_writes", "data", "thread_id = %s", chain.thread_id)
    with pytest.raises(CheckpointCorrupt):  # writes are read from PostgreSQL every time
        saver.get_tuple(chain.latest)
    flip_first_byte(stack, "lg_writes", "data", "thread_id = %s", chain.thread_id)
    flip_first_byte(stack, "lg_blobs", "data", "thread_id = %s AND channel = 'a'", chain.thread_id)
    with pytest.raises(CheckpointCorrupt) as info:
        from_postgresql(stack, chain.latest)
    assert info.value.context["channel"] == "a"
    flip_first_byte(stack, "lg_blobs", "data", "thread_id = %s AND channel = 'a'", chain.thread_id)
    with stack.pg.connection() as conn:  # a value moved under another type is found too
        conn.execute(
            "UPDATE lg_blobs SET type = 'bytes' WHERE thread_id = %s AND channel = 'b'",
            (chain.thread_id,),
        )
    with pytest.raises(CheckpointCorrupt):
        from_postgresql(stack, chain.latest)
    with stack.pg.connection() as conn:  # and a value the checkpoint needs that is gone
        conn.execute("DELETE FROM lg_blobs WHERE thread_id = %s", (chain.thread_id,))
    with pytest.raises(CheckpointCorrupt, match="missing"):
        from_postgresql(stack, chain.latest)


class Boom:
    """Unpickling this runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def plant(stack: amber.Stack, thread_id: str, channel: str, kind: str, data: bytes) -> None:
    """Replace a stored value the way someone with write access to the database could,
    checksum included (SHA-256 is no secret); readers then go to PostgreSQL
    (``from_postgresql``)."""
    with stack.pg.connection() as conn:
        version = conn.execute(
            "SELECT version FROM lg_blobs WHERE thread_id = %s AND channel = %s",
            (thread_id, channel),
        ).fetchone()
        assert version is not None
        digest = Blob(channel, version[0], kind, data, None).digest()
        conn.execute(
            "UPDATE lg_blobs SET type = %s, data = %s, size = NULL, sha256 = %s"
            " WHERE thread_id = %s AND channel = %s",
            (kind, data, digest, thread_id, channel),
        )


def test_a_crafted_payload_is_refused_and_never_runs_code(
    stack: amber.Stack, saver: AmberSaver, uid: ID, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('ran')"
    call = ormsgpack.packb(("builtins", "exec", code))
    ext = ormsgpack.packb(ormsgpack.Ext(jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG, call))
    # the payload is live: LangGraph's serializer in its permissive mode (today's default
    # unless LANGGRAPH_STRICT_MSGPACK is set) executes it on load
    jsonplus.JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed(("msgpack", ext))
    assert marker.exists()
    marker.unlink()

    chain = Chain(saver, uid("t"))
    chain.step(state="fine", other="fine")
    plant(stack, chain.thread_id, "state", "msgpack", ext)
    with pytest.raises(PayloadRefused) as info:
        from_postgresql(stack, chain.latest)
    assert info.value.context["type"] == "builtins.exec"
    assert info.value.context["thread_id"] == chain.thread_id
    plant(stack, chain.thread_id, "state", "pickle", pickle.dumps(Boom(marker)))
    with pytest.raises(PayloadRefused, match="never pickle"):
        from_postgresql(stack, chain.latest)
    call = ormsgpack.packb(("os", "system", ["id"]))
    nested = ormsgpack.packb({"ok": [1, ormsgpack.Ext(jsonplus.EXT_CONSTRUCTOR_POS_ARGS, call)]})
    plant(stack, chain.thread_id, "state", "msgpack", nested)
    with pytest.raises(PayloadRefused, match=r"os\.system"):
        from_postgresql(stack, chain.latest)
    assert not marker.exists()


def test_pending_writes_are_decoded_by_the_same_allow_list(
    stack: amber.Stack, saver: AmberSaver, uid: ID, tmp_path: Path
) -> None:
    chain = Chain(saver, uid("t"))
    config = chain.step(a=1)
    saver.put_writes(config, [("a", 2)], "task")
    data = pickle.dumps(Boom(tmp_path / "ran"))
    digest = Write("task", 0, "a", "pickle", data, None, "").digest()
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE lg_writes SET type = 'pickle', data = %s, sha256 = %s WHERE thread_id = %s",
            (data, digest, chain.thread_id),
        )
    with pytest.raises(PayloadRefused):
        saver.get_tuple(chain.latest)
    assert not (tmp_path / "ran").exists()


def test_user_types_are_rebuilt_only_when_allowed(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"))
    chain.step(p=Point(1, 2))
    with pytest.raises(PayloadRefused, match=r"test_saver\.Point"):
        saver.get_tuple(chain.latest)
    allowed = AmberSaver(stack, allowed_types=[Point])
    got = allowed.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["channel_values"] == {"p": Point(1, 2)}
    clone = saver.with_allowlist([(Point.__module__, "Point")])
    got = clone.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["channel_values"]["p"] == Point(1, 2)
    with pytest.raises(PayloadRefused):  # the original is unchanged
        saver.get_tuple(chain.latest)


def test_values_msgpack_cannot_hold_are_refused_not_pickled(saver: AmberSaver, uid: ID) -> None:
    chain = Chain(saver, uid("t"))
    chain.step(a=1)
    with pytest.raises(InvalidValue) as info:
        chain.step(f=lambda: None)
    assert info.value.context["channel"] == "f"
    got = saver.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["channel_values"] == {"a": 1}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "thread_id"),
        ({"configurable": {}}, "thread_id"),
        ({"configurable": {"thread_id": "a\x00b"}}, "thread_id"),
        ({"configurable": {"thread_id": ["x"]}}, "thread_id"),
        ({"configurable": {"thread_id": "x" * 2000}}, "thread_id"),
        ({"configurable": {"thread_id": "t", "checkpoint_ns": 3.5}}, "checkpoint_ns"),
        ({"configurable": {"thread_id": "t", "checkpoint_id": "\x00"}}, "checkpoint_id"),
    ],
)
def test_bad_configs_are_refused_naming_the_field(
    saver: AmberSaver, config: Any, field: str
) -> None:
    with pytest.raises(InvalidIdentifier) as info:
        saver.get_tuple(config)
    assert info.value.context["field"] == field


def test_bad_arguments_are_amber_errors_naming_what(saver: AmberSaver, uid: ID) -> None:
    chain = Chain(saver, uid("t"))
    config = chain.step(a=1)
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: saver.put_writes(chain.latest, [("a", 1)], "task"), "checkpoint_id"),
        (lambda: list(saver.list(chain.latest, filter={"a": {1, 2}})), "filter"),
        (lambda: list(saver.list(chain.latest, limit=-1)), "limit"),
        (lambda: saver.prune([chain.thread_id], strategy="oldest"), "strategy"),
        (lambda: saver.prune([chain.thread_id], keep=0), "keep"),
        (lambda: saver.set_ttl(chain.thread_id, -5), "ttl"),
        (lambda: AmberSaver(saver_stack(saver), ttl=0), "ttl"),
        (lambda: AmberSaver(saver_stack(saver), allowed_types=["os.system"]), "allowed_types"),
    ]
    for call, field in cases:
        with pytest.raises(AmberError) as info:
            call()
        assert info.value.context.get("field") == field, (field, info.value)
    assert saver.get_tuple(config) is not None


def saver_stack(saver: AmberSaver) -> Any:
    """A stack-shaped view of a saver's engines, for constructing another saver."""
    core = saver._core
    return types.SimpleNamespace(
        redis=core.redis,
        pg=core.pg,
        keys=core.keys,
        settings=types.SimpleNamespace(checkpoint_backup_ttl=60),
    )


def test_list_pages_through_long_histories_and_across_threads(saver: AmberSaver, uid: ID) -> None:
    run = uid("run")
    chains = [Chain(saver, uid("t")) for _ in range(2)]
    for i in range(40):
        for chain in chains:
            chain.step(metadata={"run": run}, a=i)
    ids = chains[0].ids
    listed = [t.checkpoint["id"] for t in saver.list(chains[0].latest)]
    assert listed == ids[::-1]
    assert [t.checkpoint["id"] for t in saver.list(chains[0].latest, limit=35)] == ids[::-1][:35]
    before = {"configurable": {"thread_id": chains[0].thread_id, "checkpoint_id": ids[20]}}
    assert [t.checkpoint["id"] for t in saver.list(chains[0].latest, before=before)] == ids[19::-1]
    everywhere = list(saver.list(None, filter={"run": run}))
    assert len(everywhere) == 80
    keys = [(t.checkpoint["id"], t.config["configurable"]["thread_id"]) for t in everywhere]
    assert keys == sorted(keys, reverse=True)
    assert [t.checkpoint["channel_values"]["a"] for t in everywhere[:4]] == [39, 39, 38, 38]


def test_without_redis_every_call_still_works_on_postgresql(
    stack: amber.Stack, saver: AmberSaver, uid: ID, tmp_path: Path
) -> None:
    dead = redis.Redis(
        unix_socket_path=str(tmp_path / "no-redis.sock"), retry=Retry(NoBackoff(), 0)
    )
    view = saver_stack(saver)
    view.redis = dead
    blind = AmberSaver(view)
    chain = Chain(blind, uid("t"))
    config = chain.step(a=1)
    blind.put_writes(config, [("a", 2)], "task")
    got = blind.get_tuple(chain.latest)
    assert got is not None and got.checkpoint["channel_values"] == {"a": 1}
    assert got.pending_writes == [("task", "a", 2)]
    assert len(list(blind.list(chain.latest))) == 1
    blind.delete_thread(chain.thread_id)
    assert saver.get_tuple(chain.latest) is None


def test_from_env_opens_and_closes_its_own_stack(uid: ID) -> None:
    with AmberSaver.from_env() as owned:
        chain = Chain(owned, uid("t"))
        chain.step(a=1)
        stack = owned._owned
        assert stack is not None and owned.get_tuple(chain.latest) is not None
    assert owned._owned is None and stack._closed


def test_a_config_without_a_namespace_means_the_root_one(saver: AmberSaver, uid: ID) -> None:
    # the conformance suite's test_put_default_namespace says this, but passes "" itself
    tid = uid("t")
    chain = Chain(saver, tid)
    chain.step(a=1)
    stored = saver.put(
        {"configurable": {"thread_id": tid, "checkpoint_id": chain.ids[-1]}},
        generate_checkpoint(),
        {"source": "loop", "step": 1},
        {},
    )
    assert stored["configurable"]["checkpoint_ns"] == ""
    got = saver.get_tuple({"configurable": {"thread_id": tid}})
    assert got is not None and got.config == stored
    assert got.parent_config is not None
    assert got.parent_config["configurable"]["checkpoint_id"] == chain.ids[-1]


def test_a_burst_of_puts_writes_one_hot_copy_its_newest_once_the_puts_pause(
    stack: amber.Stack, uid: ID, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[list[Any]] = []
    real = HotWrites.write

    def write(self: HotWrites, keys: list[Any], args: list[Any]) -> None:
        if self is saver._core.hot:  # not the reader's, which writes what it read
            written.append(args)
        real(self, keys, args)

    monkeypatch.setattr(HotWrites, "write", write)
    saver = AmberSaver(stack)
    saver._core.hot.quiet_s = 0.5  # a pause: longer than between two puts of the burst
    saver._core.hot.max_delay_s = 30.0
    key = stack.keys.lg_heads(uid("t"))
    chain = Chain(saver, key.split("{")[1].split("}")[0])
    for i in range(5):
        chain.step(a=i)
    got = AmberSaver(stack).get_tuple(chain.latest)  # another process, before the pause
    assert got is not None and got.checkpoint["channel_values"] == {"a": 4}  # PostgreSQL's
    deadline = time.monotonic() + 10
    while not written and time.monotonic() < deadline:
        time.sleep(0.01)
    saver.close()
    assert [args[3].split(":")[1] for args in written] == [chain.ids[-1]]  # one, the newest
    head = stack.redis.hget(key, "head:")
    with stack.pg.connection() as conn:
        row = conn.execute(
            "SELECT seq FROM lg_checkpoints WHERE thread_id = %s AND checkpoint_id = %s",
            (chain.thread_id, chain.ids[-1]),
        ).fetchone()
    assert row is not None and head == f"{row[0]:020d}:{chain.ids[-1]}".encode()
    reader = AmberSaver(stack)
    reader._core._rows = _no_body(reader._core._rows)  # type: ignore[method-assign]
    got = reader.get_tuple(chain.latest)  # from the copy: PostgreSQL sends no body
    assert got is not None and got.checkpoint["channel_values"] == {"a": 4}


def _no_body(rows: Any) -> Any:
    def checked(statement: str, params: dict[str, Any], *, known: int) -> Any:
        assert known != -1, "the Redis copy was not used"
        return rows(statement, params, known=known)

    return checked


def test_a_hot_copy_left_for_a_thread_then_deleted_is_not_written(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    chain = Chain(saver, uid("t"))
    saver._core.hot.quiet_s = saver._core.hot.max_delay_s = 30.0  # the delete comes first
    chain.step(a=1)
    saver.delete_thread(chain.thread_id)
    saver.close()
    assert stack.redis.exists(stack.keys.lg_heads(chain.thread_id)) == 0


def test_a_hot_copy_whose_script_redis_lacks_is_loaded_and_written(
    stack: amber.Stack, uid: ID
) -> None:
    fresh = stack.redis.register_script(scripts.WRITE_HEAD + f"\n-- {uid('never-loaded')}")
    hot = HotWrites(fresh)
    key = stack.keys.lg_heads(uid("t"))
    hot.write([key], ["copy:", "head:", b"sealed", f"{1:020d}:c1", 60_000])
    assert stack.redis.hget(key, "head:") == f"{1:020d}:c1".encode()
    stack.redis.delete(key)


def test_a_hot_copy_redis_cannot_take_is_logged_not_raised(
    uid: ID, caplog: pytest.LogCaptureFixture
) -> None:
    gone = redis.Redis(port=1, retry=Retry(NoBackoff(), 0), socket_connect_timeout=0.2)
    hot = HotWrites(gone.register_script(scripts.WRITE_HEAD))
    args = ["copy:", "head:", b"sealed", f"{1:020d}:c1", 60_000]
    hot.later(("t", ""), Job(1, lambda: ([uid("k")], args)))
    hot.flush()
    assert "not written" in caplog.text


def test_a_forked_child_leaves_its_parents_hot_copies_to_the_parent(
    stack: amber.Stack, uid: ID
) -> None:
    hot = _hot(stack)
    key = stack.keys.lg_heads(uid("t"))
    hot.later(("t", ""), _copy_of(key, 1))
    pid = os.fork()
    if pid == 0:  # the child: nothing of its parent's to write
        hot.flush()
        os._exit(0 if stack.redis.exists(key) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    hot.flush()
    assert stack.redis.hget(key, "head:") == f"{1:020d}:c1".encode()
    stack.redis.delete(key)


def test_reading_the_newest_checkpoint_is_planned_once_not_at_every_read(
    private_stack: amber.Stack, uid: ID
) -> None:
    saver = AmberSaver(private_stack)
    long, short = Chain(saver, uid("long")), Chain(saver, uid("short"))
    long.step(a=0)
    short.step(a=0)
    statement, params = lsql.checkpoint_rows(short.thread_id, "", None)
    with private_stack.pg.connection() as conn:
        # one thread holds nearly every row, as a long-running agent's does
        conn.execute(
            "INSERT INTO lg_checkpoints (thread_id, checkpoint_ns, checkpoint_id, metadata,"
            " channels, versions, body, body_size, body_sha256)"
            " SELECT thread_id, checkpoint_ns, checkpoint_id || '-' || g, metadata, channels,"
            " versions, body, body_size, body_sha256"
            " FROM lg_checkpoints, generate_series(1, 1000) AS g WHERE thread_id = %s",
            (long.thread_id,),
        )
        conn.execute("ANALYZE lg_checkpoints")
        for _ in range(12):
            conn.execute(statement, {**params, "known": -1}, prepare=True).fetchall()
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ("%FROM lg_checkpoints%ORDER BY checkpoint_id DESC%",),
        ).fetchall()
    # a generic plan is used once five custom ones were made: not planned again each time
    assert len(plans) == 1 and plans[0][0] >= 5, plans


def test_a_put_on_a_connection_that_cannot_take_binary_arrays_as_sent_stores_the_same(
    stack: amber.Stack, uid: ID, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the statement cannot go as prepared by amber (a connection in a transaction
    or not in UTF-8), psycopg sends the same lists: the checkpoint reads back whole, and a
    value pruned meanwhile is still found missing and written again."""
    monkeypatch.setattr("amber.engines.overlap.Overlapped.usable", lambda conn: False)
    saver = AmberSaver(stack)
    chain = Chain(saver, uid("t"))
    chain.step(a="first", b=["é", 2], c=b"\x00\xff" * 800)
    chain.step(a="second")
    got = from_postgresql(stack, chain.latest)
    assert got.checkpoint["channel_values"] == {
        "a": "second",
        "b": ["é", 2],
        "c": b"\x00\xff" * 800,
    }
    with stack.pg.connection() as conn:  # b's only stored version, gone (a lost prune race)
        conn.execute(
            "DELETE FROM lg_blobs WHERE thread_id = %s AND channel = 'b'", (chain.thread_id,)
        )
    saver._core.cache.drop_thread(chain.thread_id)  # no witness: each named value is probed
    chain.step(a="third")
    got = from_postgresql(stack, chain.latest)
    assert got.checkpoint["channel_values"] == {"a": "third", "b": ["é", 2], "c": b"\x00\xff" * 800}


def test_a_copy_left_is_replaced_by_a_newer_one_never_by_an_older(
    stack: amber.Stack, uid: ID
) -> None:
    """A reader's rewrite of what it read (an older row) never undoes a put's copy."""
    hot = _hot(stack)
    key = stack.keys.lg_heads(uid("t"))
    for seq in (5, 3, 4):
        hot.later(("t", ""), _copy_of(key, seq))
    hot.flush()
    assert stack.redis.hget(key, "head:") == f"{5:020d}:c5".encode()
    stack.redis.delete(key)


def test_flush_returns_once_a_write_under_way_has_ended(stack: amber.Stack, uid: ID) -> None:
    """``close()`` then finds the copy in Redis (and a stack it closes is not closed under
    the write), even when the writer thread took the copy first."""
    hot = _hot(stack, quiet_s=0)
    key = stack.keys.lg_heads(uid("t"))
    taken = threading.Event()

    def slow() -> tuple[list[Any], list[Any]]:
        taken.set()
        time.sleep(0.3)
        return _copy_of(key, 1).build()

    hot.later(("t", ""), Job(1, slow))
    assert taken.wait(10)  # the writer thread has it
    hot.flush()
    assert stack.redis.hget(key, "head:") == f"{1:020d}:c1".encode()
    stack.redis.delete(key)


def test_a_channel_name_that_is_not_text_is_refused_by_name(saver: AmberSaver, uid: ID) -> None:
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": "1"})
    cp["channel_versions"] = {7: "1"}  # type: ignore[dict-item]
    config = {"configurable": {"thread_id": uid("t"), "checkpoint_ns": ""}}
    with pytest.raises(InvalidValue, match="not text"):
        saver.put(config, cp, {"source": "loop", "step": 0, "parents": {}}, {7: "1"})  # type: ignore[dict-item]
    assert saver.get_tuple(config) is None


def _hot(stack: amber.Stack, quiet_s: float = 30, max_delay_s: float = 30) -> HotWrites:
    """A writer of hot copies on the stack's Redis that waits ``quiet_s`` for a pause."""
    script = stack.redis.register_script(scripts.WRITE_HEAD)
    return HotWrites(script, quiet_s=quiet_s, max_delay_s=max_delay_s)


def _copy_of(key: str, seq: int) -> Job:
    """A stand-in copy of row ``seq`` (checkpoint ``c<seq>``) for the heads hash ``key``."""
    return Job(seq, lambda: ([key], ["copy:", "head:", b"s", f"{seq:020d}:c{seq}", 60_000]))


def test_a_checkpoint_names_its_own_versions_whatever_new_versions_says(
    stack: amber.Stack, saver: AmberSaver, uid: ID
) -> None:
    """``new_versions`` should name the checkpoint's own versions of its changed channels.
    Where it names another, that version is stored as named, and the checkpoint keeps
    the versions its ``channel_versions`` give, each stored with its value: read back,
    from this process and from PostgreSQL alone, it holds every value."""
    config = {"configurable": {"thread_id": uid("t"), "checkpoint_ns": ""}}
    md = {"source": "loop", "step": 0, "parents": {}}
    cp = generate_checkpoint(
        channel_values={"a": "a1", "b": "b1"}, channel_versions={"a": "1", "b": "1"}
    )
    config = saver.put(config, cp, md, {"a": "1", "b": "1"})  # type: ignore[arg-type]
    cp = generate_checkpoint(
        channel_values={"a": "a2", "b": "b1"}, channel_versions={"a": "2", "b": "1"}
    )
    config = saver.put(config, cp, {**md, "step": 1}, {"a": "9"})  # type: ignore[arg-type]
    for got in (saver.get_tuple(config), from_postgresql(stack, config)):
        assert got is not None
        assert got.checkpoint["channel_versions"] == {"a": "2", "b": "1"}
        assert got.checkpoint["channel_values"] == {"a": "a2", "b": "b1"}
    with stack.pg.connection() as conn:
        stored = conn.execute(
            "SELECT channel, version FROM lg_blobs WHERE thread_id = %s ORDER BY 1, 2",
            (config["configurable"]["thread_id"],),
        ).fetchall()
    assert stored == [("a", "1"), ("a", "2"), ("a", "9"), ("b", "1")]
