"""amber's save and restore against LangGraph's PostgresSaver, like for like (goals of issue 25).

    PYTHONPATH=src .venv/bin/python bench/bench_save.py [--quick] [--procs 8,32]

``--procs`` runs only the throughput rounds, at those process counts (their CPU table
too), where a change to the save is judged by (e) alone.

One run, one PostgreSQL, one Redis. amber runs in the ``checkpoint`` durability mode
(every checkpoint carries the working memory into PostgreSQL, so PostgreSQL alone can
restore everything, as PostgresSaver can); ``hybrid`` is timed beside it. Each mode and
each case gets a fresh agent (new analysis and agent id) and LangGraph a fresh thread.

A step, on each side, starts from the same new values for K of the N keys:

- LangGraph: the state is N channels; the step puts the K values into it, bumps their
  versions in ``channel_versions`` and calls ``put`` with ``new_versions`` naming only
  them (so PostgresSaver writes only their blobs, as a graph run does).
- amber: the working memory holds the N keys in Redis as JSON strings; the step encodes
  the K values, writes them in one batch deferred to the save (``batch(defer=True)``: they
  go to Redis with the save's copies while PostgreSQL commits) and calls
  ``save_checkpoint``. Beside the 5-key saves, ``batch now`` times the same step with the
  batch applied when its block ends (``batch()``), then the save.

Timed from the first change to the save's return. The sides alternate which goes first
(``_harness.series`` rotates the order every round). Restores read PostgreSQL only:
amber recovers the working memory into an empty key prefix and restores the checkpoint;
LangGraph's ``get_tuple`` returns every channel value. Throughput runs 1, 8 and 32
processes with their own connections, agents and threads, for a fixed time per side,
the sides taking turns; the ``redis + pg`` floor (the changed values written to Redis in
one round trip, then one row committed) takes its turn beside them.

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own database and key prefixes and removes them afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import orjson
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    LANGGRAPH_TABLES,
    BenchAgent,
    Engines,
    Payload,
    Stats,
    analyze,
    commit_floor,
    cpu_seconds,
    delete_prefix,
    engines,
    header,
    make_agent,
    pg_setting,
    print_table,
    redis_pg_floor,
    restore_floor,
    series,
    server_processes,
    stats,
    write_keys,
)
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver

import amber
from amber.stack import Stack

MODES = ("checkpoint", "hybrid")
"""amber's durability modes, the one the goals are for first."""
LANGGRAPH = "langgraph"
NOW = "batch now"
"""``checkpoint`` with the step's writes applied when their batch ends (``batch()``), for
reference beside the deferred batch (``batch(defer=True)``) the goals are measured with."""
FLOOR = "pg commit"
"""A one-row INSERT committed on its own: what any save durable in PostgreSQL pays at least."""
FLOOR_REDIS = "redis + pg"
"""The changed values written to Redis in one round trip, then :data:`FLOOR`: what any save
pays whose working memory is in Redis and whose durability is PostgreSQL's."""
FLOOR_RESTORE = "pg + redis"
"""The newest memory read from PostgreSQL, its keys written to Redis with their TTL in one
script, nothing checked or indexed: what any restore of working memory from PostgreSQL into
Redis pays at least (``restore_floor``)."""
CHANGED = 5
"""Keys a step changes in the "5 changed" cases."""
SUBTASK = "gather"


@dataclass(frozen=True)
class Goal:
    """A goal of issue 25 for the ``checkpoint`` row of one case."""

    text: str
    met: Callable[[float, float], bool]
    """(amber median, ratio amber / LangGraph) → met."""


GOALS = {
    "save_5": Goal("<= 1.0x put", lambda ms, r: r <= 1.0),
    "save_all": Goal("<= 1.3x put", lambda ms, r: r <= 1.3),
    "save_big": Goal("<= 0.05x put", lambda ms, r: r <= 0.05),
    "snapshot": Goal("<= 1.0x put", lambda ms, r: r <= 1.0),
    "restore": Goal("<= 1.2x get_tuple", lambda ms, r: r <= 1.2),
    "restore_big": Goal("<= 2.0x get_tuple", lambda ms, r: r <= 2.0),
    "throughput": Goal(">= 1.0x LangGraph", lambda rate, r: r >= 1.0),
}


# -- the two sides -------------------------------------------------------------------------
class AmberSide:
    """One agent of one stack (durability mode) whose working memory holds the payload."""

    def __init__(self, stack: Stack, payload: Payload, defer: bool = True) -> None:
        self.stack = stack
        self.defer = defer
        self.agent: BenchAgent = make_agent(stack, payload, write_l1=False)
        write_keys(self.agent.l1_cache, payload.encoded())
        stack.checkpointer.save_checkpoint(self.agent, SUBTASK)

    def step(self, changes: dict[str, Any]) -> None:
        """Write the changed keys in one batch, deferred to the save (``defer``: they go
        to Redis with its copies while PostgreSQL commits), then checkpoint."""
        with self.agent.l1_cache.batch(defer=self.defer) as b:
            for k, v in changes.items():
                b.set(k, orjson.dumps(v))
        self.stack.checkpointer.save_checkpoint(self.agent, SUBTASK)


class LangGraphSide:
    """One LangGraph thread whose channels are the payload's keys."""

    def __init__(self, saver: PostgresSaver, payload: Payload | None) -> None:
        self.saver = saver
        self.state: dict[str, Any] = {}
        self.versions: dict[str, str | int | float] = {}
        self.thread_id = f"bench-{uuid.uuid4().hex}"
        self.config: Any = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ""}}
        self.steps = 0
        if payload is not None:
            self.step(dict(payload.values))

    def step(self, changes: dict[str, Any]) -> None:
        """Change the channels, bump their versions and ``put`` naming only them."""
        self.state.update(changes)
        for k in changes:
            self.versions[k] = self.saver.get_next_version(self.versions.get(k), None)
        cp = empty_checkpoint()
        cp["channel_values"] = self.state  # put copies what it keeps
        cp["channel_versions"] = self.versions
        self.steps += 1
        self.config = self.saver.put(
            self.config,
            cp,
            {"source": "loop", "step": self.steps, "parents": {}},
            {k: self.versions[k] for k in changes},
        )

    def restore(self) -> dict[str, Any]:
        """The latest checkpoint's channel values, from PostgreSQL."""
        latest: Any = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ""}}
        tup = self.saver.get_tuple(latest)
        assert tup is not None
        values: dict[str, Any] = tup.checkpoint["channel_values"]
        return values


class FloorSide:
    """:data:`FLOOR_REDIS` as a side, beside the 5-key saves and in the throughput rounds:
    the changed values written to Redis in one round trip, then one row committed
    (``_harness.redis_pg_floor``; ``commit``: an op of ``commit_floor`` already made)."""

    def __init__(self, stack: Stack, commit: Callable[[int], None] | None = None) -> None:
        self.op = redis_pg_floor(stack, commit or commit_floor(stack))

    def step(self, changes: dict[str, Any]) -> None:
        """Write the changed values to Redis in one round trip, then commit one row."""
        self.op([(k, orjson.dumps(v)) for k, v in changes.items()])


def amber_restore(target: Stack, side: AmberSide, keys: int) -> None:
    """Recover ``side``'s agent's working memory and checkpoint into ``target``, whose key
    prefix is empty: both come from PostgreSQL."""
    a = side.agent
    report = target.recovery.recover_agent_state(a.agent_id, a.analysis_id, a.agent_type)
    assert report.path == "postgresql_checkpoint" and report.keys == keys, report
    r = target.checkpointer.restore_checkpoint(a.analysis_id, a.agent_type, agent_id=a.agent_id)
    assert r.source == "postgresql" and r.checkpoint.seq == a.checkpoint_seq, r


def same_state(target: Stack, side: AmberSide, lg: LangGraphSide, payload: Payload) -> None:
    """Both restores hold the payload as it is now (checked once, untimed)."""
    mem = target.memory(side.agent.agent_id)
    lg_values = lg.restore()
    for name in list(payload.values)[:: max(1, len(payload.values) // 50)]:
        assert mem.get(name) == orjson.dumps(payload.values[name]), name
        assert lg_values[name] == payload.values[name], name


# -- latency cases ------------------------------------------------------------------------
@dataclass
class Case:
    """One case's timings: median and p99 per side, in ms."""

    label: str
    goal: str
    st: dict[str, Stats]
    vs: str = "put"
    scaled: bool = False
    """True when --quick shrank the case below the size its goal names."""


class Bench:
    """The stacks, the LangGraph saver and the cases measured so far."""

    def __init__(self, eng: Engines, saver: PostgresSaver, quick: bool) -> None:
        self.eng = eng
        self.saver = saver
        self.quick = quick
        self.stacks = {mode: eng.connect(mode) for mode in MODES}
        self.restore_stack = eng.connect("checkpoint", tag="restore")
        self.cases: list[Case | str] = []
        self.commit_floor = commit_floor(self.stacks["checkpoint"])
        self.redis_floor = FloorSide(self.stacks["checkpoint"], self.commit_floor)

    def sides(self, payload: Payload) -> tuple[dict[str, AmberSide], LangGraphSide]:
        """Fresh agents (one per mode) and a fresh thread, holding ``payload``."""
        amber_sides = {mode: AmberSide(self.stacks[mode], payload) for mode in MODES}
        return amber_sides, LangGraphSide(self.saver, payload)

    def save(
        self, goal: str, payload: Payload, changed: int | None, n: int, budget: float
    ) -> tuple[AmberSide, LangGraphSide]:
        """Steps changing ``changed`` keys (all if None), every side in every round."""
        amber_sides, lg = self.sides(payload)
        changes: dict[str, Any] = {}

        def before(i: int) -> None:
            changes.clear()
            changes.update(payload.change(changed))

        ops: dict[str, Callable[[int], Any]] = {
            mode: (lambda i, s=side: s.step(changes)) for mode, side in amber_sides.items()
        }
        ops[LANGGRAPH] = lambda i: lg.step(changes)
        if goal in ("save_5", "save_big"):  # the floors, beside the 5-key saves
            now = AmberSide(self.stacks["checkpoint"], payload, defer=False)
            ops[NOW] = lambda i: now.step(changes)
            ops[FLOOR] = self.commit_floor
            ops[FLOOR_REDIS] = lambda i: self.redis_floor.step(changes)
        out = series(ops, n, before=before, budget_s=budget)
        keys = len(payload.values)
        what = "all" if changed is None else str(changed)
        self.cases.append(
            Case(
                f"save, {keys:,} keys, {what} changed",
                goal,
                {k: stats(v) for k, v in out.items()},
                scaled=keys < 10_000 and goal == "save_big",
            )
        )
        return amber_sides["checkpoint"], lg

    def snapshot(self, payload: Payload, n: int, budget: float) -> None:
        """The first save of a fresh memory (its whole image into PostgreSQL) beside
        LangGraph's first put of the same state into a fresh thread."""
        stack, keys, fresh = self.stacks["checkpoint"], len(payload.values), {}

        def before(i: int) -> None:
            agent = make_agent(stack, payload, write_l1=False)
            write_keys(agent.l1_cache, payload.encoded())
            fresh["agent"], fresh["lg"] = agent, LangGraphSide(self.saver, None)

        def take(i: int) -> None:
            cp = stack.checkpointer.save_checkpoint(fresh["agent"], SUBTASK)
            assert cp.l1_snapshot_keys == keys

        def put(i: int) -> None:
            fresh["lg"].step(dict(payload.values))

        out = series(
            {"checkpoint": take, LANGGRAPH: put}, n, before=before, budget_s=budget, collect=True
        )
        self.cases.append(
            Case(
                f"first save of a fresh memory, {keys:,} keys",
                "snapshot",
                {k: stats(v) for k, v in out.items()},
                scaled=keys < 10_000,
            )
        )

    def restore(
        self, side: AmberSide, lg: LangGraphSide, payload: Payload, n: int, budget: float
    ) -> None:
        """Restore with the working memory, from PostgreSQL only, into an empty prefix."""
        target, keys = self.restore_stack, len(payload.values)

        def empty(i: int) -> None:
            delete_prefix(target.redis, target.keys.prefix)

        def get(i: int) -> None:
            assert len(lg.restore()) == keys

        a = side.agent
        floor = restore_floor(target, a.analysis_id, a.agent_type)
        analyze(target, *LANGGRAPH_TABLES, "agent_checkpoints", "analyses")
        out = series(
            {
                "checkpoint": lambda i: amber_restore(target, side, keys),
                LANGGRAPH: get,
                FLOOR_RESTORE: floor,
            },
            n,
            before_each=empty,
            budget_s=budget,
            collect=keys >= 10_000,
        )
        empty(0)  # the last op of the last round may have been another's: restore again
        amber_restore(target, side, keys)
        same_state(target, side, lg, payload)
        empty(0)
        self.cases.append(
            Case(
                f"restore with memory, {keys:,} keys",
                "restore_big" if keys >= 10_000 else "restore",
                {k: stats(v) for k, v in out.items()},
                vs="get_tuple",
            )
        )

    def run(self) -> None:
        q = self.quick
        big_scale = 10 if q else 100
        n_small, n_big = (5, 3) if q else (300, 40)
        b_small, b_big = (3.0, 4.0) if q else (25.0, 40.0)

        small = Payload.make()
        self.cases.append(f"{len(small.values)} keys, about {small.json_bytes() // 1000} KB")
        side, lg = self.save("save_5", small, CHANGED, n_small, b_small)
        self.save("save_all", Payload.make(seed=2), None, n_small, b_small)
        self.restore(side, lg, small, n_small, b_small)

        big = Payload.make(scale=big_scale, seed=3, small=True)
        self.cases.append(
            f"{len(big.values):,} keys, small values, about {big.json_bytes() / 1e6:.1f} MB"
        )
        side, lg = self.save("save_big", big, CHANGED, n_big, b_big)
        self.snapshot(big, max(3, n_big // 4), b_big)
        self.restore(side, lg, big, max(3, n_big // 2), b_big)

    def rows(self) -> list[tuple[str, ...] | str]:
        out: list[tuple[str, ...] | str] = []
        for case in self.cases:
            if isinstance(case, str):
                out.append(case)
                continue
            lg = case.st[LANGGRAPH]
            for mode in (*MODES, NOW, FLOOR, FLOOR_REDIS, FLOOR_RESTORE):
                if mode not in case.st:
                    continue
                st = case.st[mode]
                ratio, ratio99 = st.p50 / lg.p50, st.p99 / lg.p99
                goal = GOALS[case.goal] if mode == "checkpoint" else None
                met = "" if goal is None else verdict(goal.met(st.p50, ratio), case.scaled)
                out.append((
                    case.label, mode, str(st.n), f"{st.p50:.3f}", f"{st.p99:.3f}",
                    f"{lg.p50:.3f}", f"{lg.p99:.3f}", case.vs, f"{ratio:.2f}x",
                    f"{ratio99:.2f}x", goal.text if goal else "", met,
                ))  # fmt: skip
        return out


def verdict(met: bool, scaled: bool) -> str:
    if scaled:
        return "(quick)"
    return "yes" if met else "NO"


LATENCY_HEAD = (
    "case", "amber", "n", "p50 ms", "p99 ms", "LG p50", "LG p99", "LG op", "ratio p50",
    "ratio p99", "goal", "met",
)  # fmt: skip


# -- throughput ---------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerSpec:
    redis_url: str
    database_url: str
    data_dir: str
    prefix: str
    seed: int


STEP_SETS = 64
"""Different steps (5 new values each) a worker prepares and then cycles through."""


def worker(spec: WorkerSpec, conn: Connection) -> None:
    """One process: its own stacks, saver, agents and thread. Answers each (side, start,
    stop) with the latencies (ms) of the saves it completed in [start, stop]."""
    stacks: list[Stack] = []
    try:
        for mode in MODES:
            stacks.append(
                amber.connect(
                    spec.redis_url, spec.database_url, data_dir=spec.data_dir,
                    prefix=spec.prefix, durability=mode, pg_pool_max=2,
                )
            )  # fmt: skip
        payload = Payload.make(seed=spec.seed)
        with PostgresSaver.from_conn_string(spec.database_url) as saver:
            sides: dict[str, Any] = {
                m: AmberSide(s, payload) for m, s in zip(MODES, stacks, strict=True)
            }
            sides[LANGGRAPH] = LangGraphSide(saver, payload)
            sides[FLOOR_REDIS] = FloorSide(stacks[0])
            steps = [payload.change(CHANGED) for _ in range(STEP_SETS)]
            conn.send("ready")
            i = 0
            while (msg := conn.recv()) is not None:
                side, start, stop = msg
                time.sleep(max(0.0, start - time.monotonic()))
                done: list[float] = []
                while (t0 := time.monotonic()) < stop:
                    sides[side].step(steps[i % STEP_SETS])
                    i += 1
                    if (t1 := time.monotonic()) <= stop:
                        done.append((t1 - t0) * 1000)
                conn.send(done)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        for s in stacks:
            s.close()


CPU_PARTS = ("client", "redis", "postgresql")
"""Where a save's CPU time is spent: the saving processes, the Redis server, PostgreSQL
(its postmaster and every backend)."""


@dataclass
class Throughput:
    procs: int
    rates: dict[str, list[float]]
    """Saves per second of all processes together, per round."""
    latencies: dict[str, list[float]]
    cpu: dict[str, list[float]] = field(default_factory=dict)
    """CPU seconds per part (:data:`CPU_PARTS`) over every round of a side; empty when
    the servers are not this run's own (their CPU cannot be read)."""
    saves: dict[str, int] = field(default_factory=dict)


def throughput(eng: Engines, procs: int, seconds: float, rounds: int) -> Throughput:
    """``procs`` worker processes; each round runs every side for ``seconds``, the side
    that goes first rotating from round to round."""
    ctx = mp.get_context("forkserver")
    pipes: list[Connection] = []
    workers = []
    for w in range(procs):
        mine, theirs = ctx.Pipe()
        spec = WorkerSpec(eng.redis_url, eng.database_url, str(eng.data_dir),
                          f"{eng.prefix}-p{procs}", 1000 * procs + w)  # fmt: skip
        p = ctx.Process(target=worker, args=(spec, theirs), daemon=True)
        p.start()
        pipes.append(mine)
        workers.append(p)

    def answers() -> list[Any]:
        out = []
        for c in pipes:
            if not c.poll(300):
                raise TimeoutError("a benchmark worker did not answer in 300 s")
            msg = c.recv()
            if isinstance(msg, tuple) and msg[0] == "error":
                raise RuntimeError(f"a benchmark worker failed:\n{msg[1]}")
            out.append(msg)
        return out

    sides = [*MODES, LANGGRAPH, FLOOR_REDIS]
    result = Throughput(procs, {s: [] for s in sides}, {s: [] for s in sides})
    servers = server_processes(eng)
    clients = [psutil.Process(p.pid) for p in workers]

    def cpu() -> list[float]:
        assert servers is not None
        return [cpu_seconds(clients), cpu_seconds(servers["redis"]),
                cpu_seconds(servers["postgresql"], children=True)]  # fmt: skip

    try:
        answers()
        for r in range(rounds):
            k = r % len(sides)
            for side in sides[k:] + sides[:k]:
                before = cpu() if servers else []
                start = time.monotonic() + 0.05
                for c in pipes:
                    c.send((side, start, start + seconds))
                done = answers()
                saves = sum(len(d) for d in done)
                if servers:
                    spent = [b - a for a, b in zip(before, cpu(), strict=True)]
                    old = result.cpu.get(side, [0.0] * len(CPU_PARTS))
                    result.cpu[side] = [x + y for x, y in zip(old, spent, strict=True)]
                    result.saves[side] = result.saves.get(side, 0) + saves
                result.rates[side].append(saves / seconds)
                result.latencies[side] += [ms for d in done for ms in d]
    finally:
        for c in pipes:
            with contextlib.suppress(OSError):  # a worker that failed has gone
                c.send(None)
        for p in workers:
            p.join(30)
        delete_prefix(eng.stack.redis, f"{eng.prefix}-p{procs}")
    return result


def connections_free(eng: Engines) -> int:
    with eng.stack.pg.connection() as conn:
        row = conn.execute(
            "SELECT current_setting('max_connections')::int - count(*) FROM pg_stat_activity"
        ).fetchone()
    return int(row[0]) if row else 0


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def throughput_rows(results: list[Throughput]) -> list[tuple[str, ...] | str]:
    out: list[tuple[str, ...] | str] = []
    for t in results:
        lg_rate = median(t.rates[LANGGRAPH])
        lg = stats(t.latencies[LANGGRAPH])
        for mode in (*MODES, FLOOR_REDIS):
            rate, st = median(t.rates[mode]), stats(t.latencies[mode])
            ratio = rate / lg_rate
            goal = GOALS["throughput"] if mode == "checkpoint" and t.procs >= 8 else None
            out.append((
                f"{t.procs} process{'es' if t.procs > 1 else ''}", mode,
                str(len(t.rates[mode])), f"{rate:,.0f}", f"{lg_rate:,.0f}", f"{ratio:.2f}x",
                f"{st.p50:.2f}", f"{st.p99:.2f}", f"{lg.p50:.2f}", f"{lg.p99:.2f}",
                goal.text if goal else "", verdict(goal.met(rate, ratio), False) if goal else "",
            ))  # fmt: skip
    return out


def cpu_rows(results: list[Throughput]) -> list[tuple[str, ...] | str]:
    """CPU time per save, by part, and the saves/s it allows on this machine's cores."""
    cores = os.cpu_count() or 1
    out: list[tuple[str, ...] | str] = []
    for t in results:
        if not t.cpu:
            continue
        per = {
            side: [x / t.saves[side] * 1e6 for x in parts]
            for side, parts in t.cpu.items()
            if t.saves.get(side)
        }
        if LANGGRAPH not in per:
            continue
        lg_total = sum(per[LANGGRAPH])
        for side in (*MODES, LANGGRAPH, FLOOR_REDIS):
            if side not in per:
                continue
            parts = per[side]
            total = sum(parts)
            out.append((
                f"{t.procs} process{'es' if t.procs > 1 else ''}", side,
                *(f"{x:,.0f}" for x in parts), f"{total:,.0f}", f"{total / lg_total:.2f}x",
                f"{cores / total * 1e6:,.0f}",
            ))  # fmt: skip
    return out


CPU_HEAD = (
    "processes", "side", "client us", "redis us", "pg us", "total us", "vs LG",
    "ceiling saves/s",
)  # fmt: skip


THROUGHPUT_HEAD = (
    "processes", "side", "rounds", "saves/s", "LG saves/s", "ratio", "p50 ms", "p99 ms",
    "LG p50", "LG p99", "goal", "met",
)  # fmt: skip


# -- main --------------------------------------------------------------------------------
def _counts(text: str) -> tuple[int, ...]:
    """``8,32`` as process counts, each 1 or more."""
    try:
        levels = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("process counts separated by commas, e.g. 8,32") from None
    if min(levels) < 1:
        raise argparse.ArgumentTypeError("process counts of 1 or more")
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, counts cut")
    parser.add_argument(
        "--procs", type=_counts, help="only the throughput rounds, at these process counts"
    )
    args = parser.parse_args()
    quick, only = args.quick, args.procs
    levels, seconds, rounds = ((1, 4), 0.3, 2) if quick else ((1, 8, 32), 3.0, 3)
    levels = only or levels
    with engines("bench-save") as eng, PostgresSaver.from_conn_string(eng.database_url) as saver:
        saver.setup()
        bench = Bench(eng, saver, quick)
        amber_sc = {m: pg_setting(s, "synchronous_commit") for m, s in bench.stacks.items()}
        row: Any = saver.conn.execute("SELECT current_setting('synchronous_commit') AS v")
        lg_sc = str(row.fetchone()["v"])
        assert set(amber_sc.values()) == {lg_sc}, (amber_sc, lg_sc)
        small, big = Payload.make(), Payload.make(scale=10 if quick else 100, small=True)
        header(
            "bench_save: amber save / restore vs LangGraph PostgresSaver, same PostgreSQL",
            eng,
            {
                "sync":
                    f"synchronous_commit={lg_sc} on amber's pools and LangGraph's connection",
                "payload": f"{len(small.values)} keys, {small.json_bytes():,} bytes as JSON; "
                           f"{len(big.values):,} keys, {big.json_bytes():,} bytes as JSON; "
                           "every value a dict or list, seed fixed",
                "modes": "durability=checkpoint (goals) and hybrid, a fresh agent per mode "
                         "and case; values stored as JSON strings",
                "writes": "AgentMemory.batch(defer=True): the step's writes go to Redis with the"
                " save's copies while PostgreSQL commits ('batch now': batch(), applied when"
                " the block ends, then the save)",
                "peer": "langgraph-checkpoint-postgres PostgresSaver.from_conn_string, "
                        "default serde, a fresh thread per case",
                "iterations": "the throughput rounds alone (--procs)" if only else
                              "quick smoke run, sizes and counts cut" if quick else
                              "100 keys: 300 per side, 10,000 keys: 40 saves, 20 restores"
                              ", 10 first saves (fewer if the time budget runs out; see n)",
                "processes": f"{', '.join(map(str, levels))}, each with 100 keys, 5 changed "
                             f"per save; {rounds} rounds of {seconds:g} s per side, the "
                             "first side rotating",
            },
        )  # fmt: skip
        if only is None:
            bench.run()
        results = []
        for procs in levels:
            need = procs * (len(MODES) + 1) + 10
            if connections_free(eng) < need:
                print(f"[{procs} processes skipped: PostgreSQL has fewer than {need} "
                      "connections free]")  # fmt: skip
                continue
            results.append(throughput(eng, procs, seconds, rounds))
    if only is None:
        print_table(LATENCY_HEAD, bench.rows(), right={2, 3, 4, 5, 6, 8, 9})
    print_table(THROUGHPUT_HEAD, throughput_rows(results), right={2, 3, 4, 5, 6, 7, 8, 9})
    print("ratio: amber / LangGraph, each side timed in the same rounds. Latency: below 1.00x")
    print("amber is faster. Throughput: saves/s of all processes together (median of the")
    print("rounds), above 1.00x amber is faster; p50 / p99: one save's latency in those rounds.")
    print(f"'{FLOOR_REDIS}' is the floor (Redis writes, one row committed), its ratio to")
    print("LangGraph's taken the same way in the same rounds.")
    print("Goals (issue 25) are for durability=checkpoint; hybrid is shown for reference.")
    cpu = cpu_rows(results)
    if cpu:
        print()
        print_table(CPU_HEAD, cpu, right={2, 3, 4, 5, 6, 7})
        print("CPU per save over the throughput rounds: the saving processes, the Redis server")
        print("and PostgreSQL (postmaster and backends). On a machine whose cores are all busy,")
        print(f"saves/s cannot pass cores / CPU per save ({os.cpu_count()} cores here): the")
        print("ratio of the totals is the throughput ratio that CPU ceiling allows.")


if __name__ == "__main__":
    main()
