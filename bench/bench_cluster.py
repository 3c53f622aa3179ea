"""Many agents checkpointing at once on a Redis Cluster and on one Redis server, and restore
latency against the number of stored checkpoint rows.

    PYTHONPATH=src:. .venv/bin/python bench/bench_cluster.py [--quick]
        [--procs 10] [--agents 100] [--saves 10] [--rows 1000,100000,1000000]

Concurrency: ``--procs`` processes with ``--agents`` threads each, one agent per thread
(10 x 100 = 1,000 agents by default: redis-py 8 keeps at most 100 connections per
client), on the same PostgreSQL database. Each agent holds a small working memory (10
keys of about 100 bytes), then, all starting together, sets one key and saves a
checkpoint ``--saves`` times (the default ``hybrid`` mode: the checkpoint in PostgreSQL,
its copies in Redis), then restores its newest checkpoint once. It runs once on the one
server and once on a local cluster (3 primaries, 3 replicas: ``tests/cluster.py``).
saves/s: every save of every agent over the wall time from the first start to the last
end.

Restore against rows: one agent's newest checkpoint is restored while
``agent_checkpoints`` holds ``--rows`` rows (filled up level by level with
``INSERT ... SELECT generate_series``, 10 checkpoints for each other agent, then
ANALYZE), in a database of its own. Two ways: with its Redis copy current, and from
PostgreSQL alone (the copy deleted before each restore).

Uses AMBER_REDIS_URL / AMBER_DATABASE_URL if set, else embedded servers in a temporary
directory; creates its own databases and key prefixes and removes them afterwards.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import threading
import time
import traceback
import uuid
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))  # tests.cluster: the local cluster

from _harness import (  # noqa: E402
    Engines,
    delete_prefix,
    engines,
    header,
    print_table,
    series,
    stats,
)

import amber  # noqa: E402
from amber.agents.base import BaseAgent  # noqa: E402
from amber.redis_url import parse_redis_url  # noqa: E402
from amber.stack import Stack  # noqa: E402

MEMORY_KEYS = 10
"""Keys in each agent's working memory."""
VALUE = b"x" * 100
"""Each key's value."""
PER_AGENT = 10
"""Checkpoints of each filler agent in the rows benchmark."""


class SaverAgent(BaseAgent):
    """An agent with as many subtasks as it saves checkpoints."""

    agent_type = "bench_cluster_agent"
    version = "1.0"
    subtasks: tuple[str, ...] = ()

    def run_subtask(self, name: str) -> Any:
        return None


def agent_class(saves: int) -> type[SaverAgent]:
    return type("SaverAgent", (SaverAgent,), {"subtasks": tuple(f"s{i:04d}" for i in range(saves))})


# -- many agents at once -------------------------------------------------------------------
def child(spec: bytes, conn: Connection, gate: Event) -> None:
    """One process: its own stack and ``agents`` threads, one agent each. Answers with
    every save's and restore's latency (ms), its start and end times and its errors."""
    s = orjson.loads(spec)
    try:
        with amber.connect(
            s["redis_url"], s["database_url"], data_dir=s["data_dir"], prefix=s["prefix"]
        ) as stack:
            cls = agent_class(s["saves"])
            agents = []
            for _ in range(s["agents"]):
                mem = stack.memory(BaseAgent.new_agent_id(cls.agent_type))
                with mem.batch() as b:
                    for k in range(MEMORY_KEYS):
                        b.set(f"note:{k}", VALUE)
                agents.append(cls(str(uuid.uuid4()), "BNCH", mem))
            saves: list[float] = []
            restores: list[float] = []
            errors: list[str] = []
            lock = threading.Lock()
            ready = threading.Barrier(len(agents) + 1)

            def run(agent: SaverAgent) -> None:
                mine: list[float] = []
                ready.wait()
                try:
                    for name in agent.subtasks:
                        agent.l1_cache.set("step", name)
                        agent.complete(name, {"done": name})
                        t0 = time.perf_counter()
                        stack.checkpointer.save_checkpoint(agent, name)
                        mine.append((time.perf_counter() - t0) * 1000)
                    t0 = time.perf_counter()
                    stack.checkpointer.restore_checkpoint(
                        agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
                    )
                    back = (time.perf_counter() - t0) * 1000
                except amber.AmberError as exc:
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    back = None
                with lock:
                    saves.extend(mine)
                    if back is not None:
                        restores.append(back)

            threads = [threading.Thread(target=run, args=(a,)) for a in agents]
            for t in threads:
                t.start()
            conn.send_bytes(b"ready")
            gate.wait()
            start = time.time()
            ready.wait()
            for t in threads:
                t.join()
            end = time.time()
            answer = {"save": saves, "restore": restores, "start": start, "end": end}
            conn.send_bytes(orjson.dumps({**answer, "errors": errors}))
    except BaseException:
        conn.send_bytes(orjson.dumps({"crash": traceback.format_exc()}))


def concurrent(eng: Engines, redis_url: str, tag: str, args: argparse.Namespace) -> dict[str, Any]:
    """``args.procs`` processes of ``args.agents`` agents each saving on ``redis_url``."""
    ctx = mp.get_context("spawn")
    gate = ctx.Event()
    prefix = f"{eng.prefix}-{tag}"
    procs, pipes = [], []
    for _ in range(args.procs):
        mine, theirs = ctx.Pipe()
        spec = orjson.dumps({
            "redis_url": redis_url, "database_url": eng.database_url,
            "data_dir": str(eng.data_dir), "prefix": prefix,
            "agents": args.agents, "saves": args.saves,
        })  # fmt: skip
        p = ctx.Process(target=child, args=(spec, theirs, gate), daemon=True)
        p.start()
        procs.append(p)
        pipes.append(mine)
    answers = []
    try:
        for c in pipes:
            if not c.poll(600):
                raise TimeoutError("a benchmark process did not get ready in 600 s")
            msg = c.recv_bytes()
            if msg != b"ready":
                raise RuntimeError(f"a benchmark process failed:\n{orjson.loads(msg)['crash']}")
        gate.set()
        for c in pipes:
            if not c.poll(1800):
                raise TimeoutError("a benchmark process did not finish in 1800 s")
            answer = orjson.loads(c.recv_bytes())
            if "crash" in answer:
                raise RuntimeError(f"a benchmark process failed:\n{answer['crash']}")
            answers.append(answer)
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    wall = max(a["end"] for a in answers) - min(a["start"] for a in answers)
    saves = [ms for a in answers for ms in a["save"]]
    errors = [e for a in answers for e in a["errors"]]
    return {
        "saves": saves,
        "restores": [ms for a in answers for ms in a["restore"]],
        "rate": len(saves) / wall,
        "wall": wall,
        "errors": errors,
    }


def concurrency_rows(runs: dict[str, dict[str, Any]], agents: int) -> list[tuple[str, ...] | str]:
    rows: list[tuple[str, ...] | str] = []
    for name, r in runs.items():
        sv, rs = stats(r["saves"]), stats(r["restores"])
        rows.append(
            (name, f"{agents:,}", f"{sv.n:,}", f"{r['wall']:.1f}", f"{r['rate']:,.0f}",
             f"{sv.p50:.1f}", f"{sv.p99:.1f}", f"{rs.p50:.1f}", f"{rs.p99:.1f}",
             str(len(r["errors"])))
        )  # fmt: skip
    return rows


# -- restore against rows ------------------------------------------------------------------
def _columns(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name ="
        " 'agent_checkpoints' AND table_schema = current_schema() ORDER BY ordinal_position"
    ).fetchall()
    return [str(r[0]) for r in rows if r[0] != "id"]


def fill(stack: Stack, template: str, upto: int) -> None:
    """Add filler checkpoints (copies of row ``template`` under other agents, ``PER_AGENT``
    each) until ``agent_checkpoints`` holds ``upto`` rows; then ANALYZE."""
    override = {
        "checkpoint_id": "gen_random_uuid()",
        "analysis_id": "md5('filler' || (g / %(per)s))::uuid",
        "agent_id": "'filler-' || (g / %(per)s)",
        "seq": "g %% %(per)s + 1",
        "l1_snapshot_base": "NULL",
    }
    with stack.pg.connection() as conn:
        cols = _columns(conn)
        have = int(conn.execute("SELECT count(*) FROM agent_checkpoints").fetchone()[0])  # type: ignore[index]
        chunk = 1_000_000
        for lo in range(have, upto, chunk):
            hi = min(upto, lo + chunk) - 1
            select = ", ".join(override.get(c, c) for c in cols)
            conn.execute(
                f"INSERT INTO agent_checkpoints ({', '.join(cols)}) SELECT {select}"
                " FROM agent_checkpoints t, generate_series(%(lo)s::bigint, %(hi)s::bigint) g"
                " WHERE t.checkpoint_id = %(template)s",
                {"per": PER_AGENT, "lo": lo, "hi": hi, "template": template},
            )
        conn.execute("ANALYZE agent_checkpoints")


def restore_vs_rows(eng: Engines, levels: list[int], n: int) -> list[tuple[str, ...] | str]:
    dbname = f"{eng.prefix.replace('-', '_')}_rows"
    with psycopg.connect(eng.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    rows: list[tuple[str, ...] | str] = []
    try:
        url = make_conninfo(eng.admin_url, dbname=dbname)
        with amber.connect(
            eng.redis_url, url, data_dir=eng.data_dir, prefix=f"{eng.prefix}-rows"
        ) as stack:
            cls = agent_class(3)
            mem = stack.memory(BaseAgent.new_agent_id(cls.agent_type))
            for k in range(MEMORY_KEYS):
                mem.set(f"note:{k}", VALUE)
            agent = cls(str(uuid.uuid4()), "BNCH", mem)
            saved = None
            for name in agent.subtasks:
                agent.complete(name, {"done": name})
                saved = stack.checkpointer.save_checkpoint(agent, name)
            assert saved is not None
            copy = stack.keys.checkpoint(agent.agent_id)

            def restore(i: int) -> None:
                got = stack.checkpointer.restore_checkpoint(
                    agent.analysis_id, agent.agent_type, agent_id=agent.agent_id
                )
                assert got.checkpoint.seq == saved.seq

            for level in levels:
                t0 = time.perf_counter()
                fill(stack, str(saved.checkpoint_id), level)
                filled = time.perf_counter() - t0
                with stack.pg.connection() as conn:
                    size = conn.execute(
                        "SELECT pg_size_pretty(pg_total_relation_size('agent_checkpoints'))"
                    ).fetchone()
                cases = {
                    "Redis copy current": series({"r": restore}, n)["r"],
                    "PostgreSQL only": series(
                        {"r": restore}, n, before=lambda i: stack.redis.delete(copy)
                    )["r"],
                }
                for how, samples in cases.items():
                    st = stats(samples)
                    rows.append(
                        (f"{level:,}", how, str(st.n), f"{st.p50:.2f}", f"{st.p99:.2f}",
                         size[0] if size else "?", f"{filled:.0f}")
                    )  # fmt: skip
    finally:
        with psycopg.connect(eng.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        delete_prefix(eng.stack.redis, f"{eng.prefix}-rows")  # its own stack's keys
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run: 2 x 5 agents, 3 saves")
    parser.add_argument("--procs", type=int, default=10)
    parser.add_argument("--agents", type=int, default=100, help="agents (threads) per process")
    parser.add_argument("--saves", type=int, default=10, help="checkpoints each agent saves")
    parser.add_argument("--rows", default="1000,100000,1000000",
                        help="row counts of agent_checkpoints to restore at")  # fmt: skip
    parser.add_argument("--restores", type=int, default=200, help="restores timed per level")
    parser.add_argument("--no-cluster", action="store_true", help="one server only")
    args = parser.parse_args()
    if args.quick:
        args.procs, args.agents, args.saves, args.restores = 2, 5, 3, 20
        args.rows = "1000,10000"
    levels = [int(x) for x in args.rows.split(",") if x]
    from tests.cluster import LocalCluster

    with engines("cluster") as eng:
        eng.connect("hybrid", tag="single")  # its keys are removed at the end
        total = args.procs * args.agents
        header(
            "many agents checkpointing at once: Redis Cluster against one server",
            eng,
            {
                "agents": f"{args.procs} processes x {args.agents} threads = {total:,} agents,"
                f" {args.saves} saves each, {MEMORY_KEYS} keys of {len(VALUE)} B in memory,"
                " durability hybrid",
                "cluster": "3 primaries + 3 replicas, loopback TCP (tests/cluster.py)",
            },
        )
        kind = parse_redis_url(eng.redis_url).kind
        label = "one server" if kind == "single" else f"AMBER_REDIS_URL ({kind})"
        runs = {label: concurrent(eng, eng.redis_url, "single", args)}
        if not args.no_cluster:
            with LocalCluster() as cluster:
                runs["cluster"] = concurrent(eng, cluster.url, "cluster", args)
        print_table(
            ("redis", "agents", "saves", "wall s", "saves/s", "save p50 ms", "save p99 ms",
             "restore p50 ms", "restore p99 ms", "errors"),
            concurrency_rows(runs, total), right={1, 2, 3, 4, 5, 6, 7, 8, 9},
        )  # fmt: skip
        for name, r in runs.items():
            for e in sorted(set(r["errors"]))[:5]:
                print(f"{name} error: {e}")
        print_table(
            ("rows in agent_checkpoints", "restore", "n", "p50 ms", "p99 ms", "table size",
             "fill s"),
            restore_vs_rows(eng, levels, args.restores), right={0, 2, 3, 4, 5, 6},
        )  # fmt: skip
        print(
            "saves/s: all saves of all agents over the wall time from the first start to the"
            " last end;\nsave and restore latency: per call, every agent's calls together."
            " Restore rows: one agent's newest checkpoint\namong the others' rows; the copy"
            " is the checkpoint's Redis backup (deleted before each PostgreSQL-only restore)."
        )


if __name__ == "__main__":
    main()
