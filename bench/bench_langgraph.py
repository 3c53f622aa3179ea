"""AmberSaver against LangGraph's PostgresSaver: put, put_writes, get_tuple, list (issue 15).

    .venv/bin/python bench/bench_langgraph.py [--quick]

The workload is a graph's: a state of 10 channels (about 10 KB, or about 1 MB, in all) of
records (text and numbers, from a fixed seed); each put is a super-step that changes 3 of
the channels, each put_writes a task's 2 writes of one channel's size. Both savers get
the same values, on the same PostgreSQL, in the same run, interleaved round by round.
get_tuple (the newest checkpoint) and list (the newest 10) run on threads with 10 and with
10,000 checkpoints (1,000 with --quick): the older ones small, the newest 10 full size.
Last, puts on a long thread (10 channels of about 1 KB, 2 changed per put, 1,000 (100
with --quick) checkpoints), then get_tuple of that thread (issue 25's (f) and (g)), each
beside its floor.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefix and removes them afterwards.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    LANGGRAPH_TABLES,
    WORDS,
    Engines,
    Row,
    analyze,
    commit_floor,
    engines,
    have_langgraph,
    header,
    quick_flag,
    series,
    stats,
    table,
)

from amber.langgraph import AmberSaver

PUT_GOAL = 0.5
"""AmberSaver.put p50 at most this fraction of PostgresSaver.put's."""
GET_GOAL = 0.5
"""AmberSaver.get_tuple p50 at most this fraction of PostgresSaver.get_tuple's."""
LONG_PUT_GOAL = 1.0
"""AmberSaver.put p50 on a long thread at most this multiple of PostgresSaver.put's."""
FLAT_GOAL = 1.25
"""A read with the long history at most this many times the one with 10 checkpoints."""

CHANNELS = 10
CHANGED = 3
SIZES = {"10 KB": 10_000, "1 MB": 1_000_000}


def records(rng: random.Random, nbytes: int) -> list[dict[str, Any]]:
    """About ``nbytes`` (as msgpack) of records: a line of text, a score, a count."""
    out: list[dict[str, Any]] = []
    size = 0
    while size < nbytes:
        text = " ".join(rng.choice(WORDS) for _ in range(8))
        out.append({"text": text, "score": rng.random(), "count": rng.randrange(10**6)})
        size += len(text) + 40
    return out


class Thread:
    """One thread of one saver: puts continue from its newest checkpoint."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver
        self.thread_id = f"bench-{uuid.uuid4().hex}"
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": self.thread_id, "checkpoint_ns": ""}
        }
        self.values: dict[str, Any] = {}
        self.versions: dict[str, Any] = {}
        self.step = 0

    @property
    def latest(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ""}}

    def put(self, changes: dict[str, Any]) -> None:
        from langgraph.pregel._checkpoint import empty_checkpoint  # v4, as graphs write

        self.step += 1
        for name, value in changes.items():
            self.values[name] = value
            self.versions[name] = self.saver.get_next_version(self.versions.get(name), None)
        cp = empty_checkpoint()
        cp["channel_values"] = dict(self.values)
        cp["channel_versions"] = dict(self.versions)
        cp["versions_seen"] = {"node": dict(self.versions)}
        md = {"source": "loop", "step": self.step, "parents": {}}
        new = {name: self.versions[name] for name in changes}
        self.config = self.saver.put(self.config, cp, md, new)

    def put_writes(self, writes: list[tuple[str, Any]]) -> None:
        self.saver.put_writes(self.config, writes, str(uuid.uuid4()))

    def get(self) -> Any:
        got = self.saver.get_tuple(self.latest)
        assert got is not None and len(got.checkpoint["channel_values"]) == CHANNELS
        return got

    def list10(self) -> list[Any]:
        got = list(self.saver.list(self.latest, limit=10))
        assert len(got) == 10
        return got


def full_state(seed: int, per_channel: int) -> dict[str, Any]:
    rng = random.Random(seed)
    return {f"ch{c}": records(rng, per_channel) for c in range(CHANNELS)}


def history(saver: Any, seed: int, per_channel: int, length: int) -> Thread:
    """A thread of ``length`` checkpoints: small ones, then the newest 10 full size."""
    thread = Thread(saver)
    rng = random.Random(seed)
    if length > 10:
        thread.put({f"ch{c}": [c] for c in range(CHANNELS)})
        for i in range(length - 11):
            thread.put({f"ch{(i + k) % CHANNELS}": [i, k] for k in range(CHANGED)})
    thread.put(full_state(seed, per_channel))
    for _ in range(9):
        picked = rng.sample(range(CHANNELS), CHANGED)
        thread.put({f"ch{c}": records(rng, per_channel) for c in picked})
    return thread


def bench_writes(
    amber: Any,
    lg: Any,
    floor: Callable[[int], None],
    label: str,
    nbytes: int,
    n: int,
    rows: list[Row | str],
) -> None:
    per = nbytes // CHANNELS
    ours, theirs = history(amber, 1, per, 10), history(lg, 1, per, 10)
    rng = random.Random(2)
    pending: dict[str, Any] = {}

    def before(i: int) -> None:
        picked = rng.sample(range(CHANNELS), CHANGED)
        pending["changes"] = {f"ch{c}": records(rng, per) for c in picked}
        pending["writes"] = [("ch0", records(rng, per)), ("ch1", records(rng, per))]

    out = series({"amber put": lambda i: ours.put(pending["changes"]),
                  "lg put": lambda i: theirs.put(pending["changes"]),
                  "pg commit": floor,
                  "amber put_writes": lambda i: ours.put_writes(pending["writes"]),
                  "lg put_writes": lambda i: theirs.put_writes(pending["writes"])},
                 n, before=before, budget_s=40.0)  # fmt: skip
    st = {k: stats(v) for k, v in out.items()}
    rows.append(f"writes, state {label}: {CHANNELS} channels, {CHANGED} change per put")
    for op, goal in (("put", PUT_GOAL), ("put_writes", None)):
        ratio = st[f"amber {op}"].p50 / st[f"lg {op}"].p50
        met = None if goal is None else ratio <= goal
        target = f"<= {goal}x" if goal else ""
        rows.append(Row(f"AmberSaver.{op}", st[f"amber {op}"], ratio, f"LG {op}", target, met))
        rows.append(Row(f"PostgresSaver.{op}", st[f"lg {op}"]))
    floor = st["pg commit"]
    rows.append(Row("PostgreSQL commit of one row (floor)", floor, floor.p50 / st["lg put"].p50,
                    "LG put"))  # fmt: skip


def rows_floor(stack: Any) -> Callable[[int], None]:
    """An op writing the rows a put of the long-thread case writes (2 channel values of
    about 1 KB and one checkpoint row naming 10 channels), in one transaction pipelined
    in one round trip, into tables of their own: no lock, no check, no checksum, no
    Redis. What any put that stores those rows durably in PostgreSQL costs at least.

    The transaction is the one PostgreSQL makes of every statement up to the pipeline's
    sync on a connection in autocommit, as LangGraph's put has it: an explicit
    ``transaction()`` sends ``BEGIN`` and ``COMMIT`` as statements of their own, and
    measured 0.24 ms slower (0.69 against 0.45 ms a put)."""
    with stack.pg.connection() as conn:
        # the pool's connections are in autocommit (else a pipeline's statements would
        # wait on a commit of ours): checked once here, not in the op timed
        assert conn.autocommit
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor_blobs (thread TEXT, channel TEXT,"
            " version TEXT, data BYTEA, PRIMARY KEY (thread, channel, version))"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor_checkpoints (thread TEXT, id TEXT,"
                     " metadata JSONB, channels TEXT[], versions TEXT[], body BYTEA,"
                     " PRIMARY KEY (thread, id))")  # fmt: skip
    rng = random.Random(5)
    blob, body = rng.randbytes(1000), rng.randbytes(400)
    channels = [f"ch{c}" for c in range(CHANNELS)]
    thread = f"floor-{uuid.uuid4().hex}"

    def put(i: int) -> None:
        with stack.pg.connection() as conn, conn.pipeline():
            for c in range(2):
                conn.execute(
                    "INSERT INTO bench_floor_blobs VALUES (%s, %s, %s, %s)",
                    (thread, f"ch{c}", f"{i}.{c}.{uuid.uuid4().hex}", blob),
                )
            conn.execute(
                "INSERT INTO bench_floor_checkpoints VALUES (%s, %s, %s::jsonb, %s, %s, %s)",
                (thread, uuid.uuid4().hex, '{"source": "loop", "step": 1}', channels,
                 [str(i)] * CHANNELS, body),
            )  # fmt: skip

    return put


NEWEST = """SELECT checkpoint_id, seq FROM lg_checkpoints WHERE thread_id = %s
    AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1"""
"""The one question any get_tuple of a thread's newest checkpoint asks PostgreSQL: which
checkpoint that is (one probe of the primary key, backwards)."""


def read_floor(stack: Any, saver: Any, thread: Thread) -> Callable[[int], None]:
    """An op asking PostgreSQL which checkpoint of ``thread`` is the newest (:data:`NEWEST`
    on ``stack``'s pool: one round trip, one index probe, no value read) and then
    unpacking the thread's channel values from ``saver``'s serialized form: what any
    get_tuple costs at least that asks PostgreSQL which checkpoint is the newest and hands
    back values of their own. It asks nothing about pending writes, which a get_tuple
    must return too."""
    typed = [saver.serde.dumps_typed(v) for v in thread.values.values()]

    def read(i: int) -> None:
        with stack.pg.connection() as conn:
            conn.execute(NEWEST, (thread.thread_id,)).fetchone()
        for t in typed:
            saver.serde.loads_typed(t)

    return read


def statement_floor(amber: Any, thread: Thread, n: int) -> Callable[[int], None]:
    """An op running amber's put statement alone (``lg_put``: the lock, the witness, the
    rows, the TTL, the commit), its parameters built beforehand from those of a real put
    of ``thread``'s, each with a fresh checkpoint id (older than the thread's, so its
    newest stays the same) and fresh versions of the values it brings: what a put with
    amber's checks costs at least, with none of its Python."""
    from amber.langgraph import core
    from amber.langgraph import sql as lsql
    from amber.langgraph.records import Blob

    seen: list[tuple[dict[str, Any], list[Any], list[Any], list[Any]]] = []
    real = amber._core._insert

    def capture(params: dict[str, Any], named: list[Any], new: list[Any], refs: list[Any]) -> Any:
        seen.append((params, named, new, refs))
        return real(params, named, new, refs)

    amber._core._insert = capture
    try:
        thread.put({"ch0": [0], "ch1": [1]})
    finally:
        del amber._core._insert
    params, named, new, refs = seen[-1]
    built = []
    for i in range(n + 10):
        fresh = [Blob(b.channel, f"{b.version}.floor{i}", b.type, b.data, b.size) for b in new]
        renamed = {b.channel: b for b in fresh}
        built.append(
            lsql.put_params(
                {**params, "checkpoint_id": f"0-floor-{uuid.uuid4()}"},
                [renamed.get(b.channel, b) for b in named],
                fresh,
                refs,
            )
        )

    def put(i: int) -> None:
        with amber._core.pg.connection() as conn:
            core._PUT.run(conn, built[i + 3])  # from the first warm-up round on

    return put


AMBER_TABLES = ("lg_checkpoints", "lg_blobs", "lg_writes")
"""AmberSaver's tables."""


def bench_long_puts(
    eng: Engines, amber: Any, lg: Any, length: int, n: int, rows: list[Row | str]
) -> None:
    """Puts at the end of a long thread: 10 channels of about 1 KB, 2 changed per put, on
    a thread that already holds ``length`` checkpoints of the same kind; then get_tuple
    of that thread's newest checkpoint (issue 25's (f) and (g))."""
    floor = rows_floor(eng.stack)
    rng = random.Random(4)

    def build(saver: Any) -> Thread:
        thread = Thread(saver)
        thread.put(full_state(4, 1_000))
        for _ in range(length - 1):
            thread.put({f"ch{c}": records(rng, 1_000) for c in rng.sample(range(CHANNELS), 2)})
        return thread

    ours, theirs = build(amber), build(lg)
    statement = statement_floor(amber, ours, n)
    pending: dict[str, Any] = {}

    def before(i: int) -> None:
        pending["changes"] = {f"ch{c}": records(rng, 1_000) for c in rng.sample(range(CHANNELS), 2)}

    out = series(
        {"amber": lambda i: ours.put(pending["changes"]),
         "lg": lambda i: theirs.put(pending["changes"]),
         "rows": floor,
         "statement": statement},
        n, before=before, budget_s=40.0,
    )  # fmt: skip
    a, g, f = stats(out["amber"]), stats(out["lg"]), stats(out["rows"])
    st = stats(out["statement"])
    rows.append(
        f"puts on a thread of {length:,} checkpoints: {CHANNELS} channels of ~1 KB, 2 changed"
    )
    rows.append(Row("AmberSaver.put", a, a.p50 / g.p50, "LG put", f"<= {LONG_PUT_GOAL}x",
                    a.p50 / g.p50 <= LONG_PUT_GOAL))  # fmt: skip
    rows.append(Row("PostgresSaver.put", g))
    rows.append(Row("the same rows, plainly inserted (floor)", f, f.p50 / g.p50, "LG put"))
    rows.append(Row("amber's statement alone, built beforehand (floor)", st, st.p50 / g.p50,
                    "LG put"))  # fmt: skip
    analyze(eng.stack, *LANGGRAPH_TABLES, *AMBER_TABLES)
    got = series({"amber": lambda i: ours.get(), "lg": lambda i: theirs.get(),
                  "floor": read_floor(eng.stack, amber, ours)}, n, warmup=3,
                 budget_s=30.0)  # fmt: skip
    a, g, f = stats(got["amber"]), stats(got["lg"]), stats(got["floor"])
    rows.append(f"get_tuple (newest) of that thread, now of {ours.step:,} checkpoints")
    rows.append(Row("AmberSaver.get_tuple, the saver that wrote it", a, a.p50 / g.p50,
                    "LG get_tuple", f"<= {GET_GOAL}x", a.p50 / g.p50 <= GET_GOAL))  # fmt: skip
    rows.append(Row("PostgresSaver.get_tuple", g))
    rows.append(Row("the newest checkpoint's id, then the values unpacked (floor)", f,
                    f.p50 / g.p50, "LG get_tuple"))  # fmt: skip
    path_rows(other_process_reads(eng, ours, theirs, n), rows)


def other_process_reads(
    eng: Engines, ours: Thread, theirs: Thread, n: int
) -> dict[str, dict[str, Any]]:
    """``ours``'s newest checkpoint read by a saver that holds no copy of it (as another
    process would): from Redis's copy, and with that dropped too, from PostgreSQL alone;
    ``theirs`` read in the same rounds. The stats of each path's two series."""
    reader: dict[str, Thread] = {}
    drop = eng.stack.keys.lg_heads(ours.thread_id)

    def fresh(i: int, redis_too: bool) -> None:
        if "t" in reader:  # its copies written now, while the servers are up
            reader["t"].saver.close()
        reader["t"] = Thread(AmberSaver(eng.stack))
        reader["t"].thread_id = ours.thread_id
        if redis_too:
            eng.stack.redis.delete(drop)

    paths = {}
    for path, redis_too in (("redis", False), ("postgresql", True)):
        got = series(
            {"amber": lambda i: reader["t"].get(), "lg": lambda i: theirs.get()},
            max(5, n),
            before=lambda i, r=redis_too: fresh(i, r),
            warmup=3,
            budget_s=30.0,
        )
        paths[path] = {k: stats(v) for k, v in got.items()}
    reader["t"].saver.close()
    return paths


def path_rows(paths: dict[str, dict[str, Any]], rows: list[Row | str]) -> None:
    """The rows of :func:`other_process_reads`' paths, the Redis copy's against the goal."""
    for path, label in (("redis", "another process: Redis copy"),
                        ("postgresql", "no copy anywhere: PostgreSQL")):  # fmt: skip
        a, g = paths[path]["amber"], paths[path]["lg"]
        goal = f"<= {GET_GOAL}x" if path == "redis" else ""
        met = a.p50 / g.p50 <= GET_GOAL if path == "redis" else None
        rows.append(Row(f"  AmberSaver.get_tuple, {label}", a, a.p50 / g.p50, "LG get_tuple",
                        goal, met))  # fmt: skip


def bench_reads(
    eng: Engines, amber: Any, lg: Any, label: str, nbytes: int, long: int, n: int,
    rows: list[Row | str],
) -> None:  # fmt: skip
    per = nbytes // CHANNELS
    t0 = time.perf_counter()
    threads = {
        (who, length): history(saver, 3, per, length)
        for who, saver in (("amber", amber), ("lg", lg))
        for length in (10, long)
    }
    built = time.perf_counter() - t0
    analyze(eng.stack, *LANGGRAPH_TABLES, *AMBER_TABLES)
    reads = 20 if nbytes > 100_000 else 1
    st = {}
    for op in ("get", "list"):  # apart: a list's garbage would be collected during a get
        ops = {
            f"{who} {op} {length}": (lambda i, t=thread: t.get())
            if op == "get"
            else (lambda i, t=thread: t.list10())
            for (who, length), thread in threads.items()
        }
        out = series(ops, max(5, n // reads), warmup=3, budget_s=40.0)
        st.update({k: stats(v) for k, v in out.items()})
    paths = other_process_reads(eng, threads[("amber", 10)], threads[("lg", 10)], n // reads)
    hist = f"{long:,} checkpoints"
    rows.append(f"get_tuple (newest), state {label} (histories built in {built:.0f} s)")
    for length in (10, long):
        a, g = st[f"amber get {length}"], st[f"lg get {length}"]
        name = "10 checkpoints" if length == 10 else hist
        rows.append(Row(f"AmberSaver.get_tuple, {name}", a, a.p50 / g.p50, "LG get_tuple",
                        f"<= {GET_GOAL}x", a.p50 / g.p50 <= GET_GOAL))  # fmt: skip
        rows.append(Row(f"PostgresSaver.get_tuple, {name}", g))
    a_flat = st[f"amber get {long}"].p50 / st["amber get 10"].p50
    rows.append(Row(f"  AmberSaver flatness: {hist} / 10", st[f"amber get {long}"], a_flat,
                    "amber 10 cps", f"<= {FLAT_GOAL}x", a_flat <= FLAT_GOAL))  # fmt: skip
    path_rows(paths, rows)
    rows.append(f"list (newest 10), state {label}")
    for length in (10, long):
        a, g = st[f"amber list {length}"], st[f"lg list {length}"]
        name = "10 checkpoints" if length == 10 else hist
        rows.append(Row(f"AmberSaver.list, {name}", a, a.p50 / g.p50, "LG list"))
        rows.append(Row(f"PostgresSaver.list, {name}", g))
    a_flat = st[f"amber list {long}"].p50 / st["amber list 10"].p50
    rows.append(Row(f"  AmberSaver flatness: {hist} / 10", st[f"amber list {long}"], a_flat,
                    "amber 10 cps", f"<= {FLAT_GOAL}x", a_flat <= FLAT_GOAL))  # fmt: skip
    g_flat = st[f"lg list {long}"].p50 / st["lg list 10"].p50
    rows.append(Row(f"  PostgresSaver flatness: {hist} / 10", st[f"lg list {long}"], g_flat,
                    "LG 10 cps"))  # fmt: skip


def main() -> None:
    quick = quick_flag()
    n, long = (12, 1_000) if quick else (200, 10_000)
    sizes = {"10 KB": SIZES["10 KB"]} if quick else SIZES
    with engines("bench-langgraph") as eng:
        if not have_langgraph():
            print("langgraph-checkpoint-postgres is not installed: nothing to compare with")
            return
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(eng.database_url) as lg:
            lg.setup()
            amber = AmberSaver(eng.stack)
            floor = commit_floor(eng.stack)
            header("bench_langgraph: AmberSaver vs LangGraph PostgresSaver", eng, {
                "state": f"{CHANNELS} channels of records, {CHANGED} changed per put; "
                         + ", ".join(sizes) + " in all",
                "peer": "PostgresSaver.from_conn_string, same database, same values",
                "history": f"10 and {long:,} checkpoints (the newest 10 full size)",
                "iterations": f"up to {n} per series (fewer when its time budget runs out:"
                              " see n)"})  # fmt: skip
            rows: list[Row | str] = []
            for label, nbytes in sizes.items():
                bench_writes(amber, lg, floor, label, nbytes, n, rows)
                bench_reads(eng, amber, lg, label, nbytes, long, n, rows)
            bench_long_puts(eng, amber, lg, 100 if quick else 1_000, n, rows)
            amber.close()  # the hot copies left to write, written while Redis is up
            table(rows)
            print("ratio: p50 / p50 of the 'vs' row, timed in the same rounds (below 1: faster).")
            print("get_tuple rows: the process that wrote the thread reads its own copy of the")
            print("newest checkpoint; another process reads Redis's copy; with neither, it reads")
            print("PostgreSQL. A copy is used only after PostgreSQL names its seq, in the round")
            print("trip that fetches the pending writes.")


if __name__ == "__main__":
    main()
