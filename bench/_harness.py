"""Shared parts of the benchmark scripts: engines, payload, timing, header and table.

Not a benchmark itself (``make bench`` runs ``bench/bench_*.py`` only).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import math
import os
import platform
import random
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil
import psycopg
import redis
from psycopg.conninfo import make_conninfo

import amber
from amber.agents.base import BaseAgent
from amber.engines.connect import redact
from amber.engines.embedded import ensure_embedded, stop_embedded
from amber.memory.working import AgentMemory
from amber.stack import Stack

SEED = 20_261_122
"""Seed of every payload: two runs measure the same bytes."""

PACKAGES = (
    "amber", "redis", "hiredis", "psycopg", "psycopg-binary", "psycopg-pool", "orjson",
    "zstandard", "langgraph-checkpoint", "langgraph-checkpoint-postgres", "ormsgpack",
)  # fmt: skip


# -- the payload -----------------------------------------------------------------------
WORDS = [
    "revenue",
    "margin",
    "guidance",
    "quarter",
    "growth",
    "cash",
    "flow",
    "capex",
    "dividend",
    "buyback",
    "debt",
    "equity",
    "valuation",
    "multiple",
    "peer",
    "sector",
    "risk",
    "outlook",
    "demand",
    "supply",
    "pricing",
    "churn",
    "segment",
    "forecast",
    "consensus",
    "estimate",
    "upside",
    "downside",
    "catalyst",
    "moat",
]


SHAPES: dict[bool, tuple[int, int, int]] = {False: (100, 18, 8), True: (8, 1, 1)}
"""Floats per series, items per API response and messages per chat: normal values (about
1 KB each) and small ones (about 150 bytes, so that 10,000 keys stay near 1.5 MB)."""


@dataclass
class Payload:
    """Values in groups of 100 keys: 40 notes, 25 lists of floats, 25 cached API responses
    (nested dicts holding a list of items), 10 chat message lists. About 100 KB per group,
    or about 15 KB with ``small``.

    ``values`` holds the Python objects (LangGraph's channel values); every one is a dict
    or a list. :meth:`encoded` gives them as JSON bytes (one working-memory string each);
    :meth:`write_l1` writes them the way an agent mixing Redis types would.
    """

    rng: random.Random
    scale: int = 1
    """Number of 100-value groups (100 keys each)."""
    small: bool = False
    values: dict[str, Any] = field(default_factory=dict)
    step: int = 0

    @classmethod
    def make(cls, scale: int = 1, seed: int = SEED, small: bool = False) -> Payload:
        p = cls(random.Random(seed), scale, small)
        for name in p.names():
            p.values[name] = p.fresh(name)
        return p

    def names(self) -> list[str]:
        out = []
        for g in range(self.scale):
            out += [f"g{g}:note:{i}" for i in range(40)]
            out += [f"g{g}:series:{i}" for i in range(25)]
            out += [f"g{g}:api_cache:{i}" for i in range(25)]
            out += [f"g{g}:chat:{i}" for i in range(10)]
        return out

    @staticmethod
    def kind(name: str) -> str:
        return name.split(":")[1]

    def _text(self, words: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(words))

    def fresh(self, name: str) -> Any:
        """A new value of the kind ``name`` holds."""
        r, kind = self.rng, self.kind(name)
        floats, items, messages = SHAPES[self.small]
        if kind == "note":
            return {"text": self._text(6), "step": self.step}
        if kind == "series":
            return [r.uniform(-1000.0, 1000.0) for _ in range(floats)]
        if kind == "api_cache":
            ticker = "".join(r.choice(string.ascii_uppercase) for _ in range(4))
            return {
                "provider": "marketdata", "endpoint": "daily_bars", "status": 200,
                "request": {"ticker": ticker, "step": self.step},
                "data": {"ticker": ticker, "currency": "USD", "items": [
                    {"date": f"2026-{1 + k % 12:02d}-{1 + k:02d}",
                     "open": round(r.uniform(10, 500), 2), "close": round(r.uniform(10, 500), 2),
                     "volume": r.randrange(10**5, 10**8)}
                    for k in range(items)
                ]},
            }  # fmt: skip
        return [
            {"role": ("user", "assistant")[k % 2], "content": self._text(20)}
            for k in range(messages)
        ]

    def change(self, count: int | None) -> dict[str, Any]:
        """Give ``count`` random values (all if None) new contents; return them by name."""
        self.step += 1
        names = self.names()
        chosen = names if count is None else self.rng.sample(names, count)
        for name in chosen:
            self.values[name] = self.fresh(name)
        return {name: self.values[name] for name in chosen}

    def encoded(self) -> list[tuple[str, bytes]]:
        """Every value as (key name, JSON bytes)."""
        return [(name, orjson.dumps(value)) for name, value in self.values.items()]

    def write_l1(self, mem: AgentMemory, names: Iterable[str] | None = None) -> None:
        """Put values into working memory: notes and API responses as JSON strings with
        ``set``, series with ``rpush``, chat messages as JSON strings in a list."""
        for name in self.values if names is None else names:
            value, kind = self.values[name], self.kind(name)
            if kind in ("note", "api_cache"):
                mem.set(name, orjson.dumps(value))
            else:
                if names is not None:
                    mem.delete(name)
                items = value if kind == "series" else [orjson.dumps(m) for m in value]
                mem.rpush(name, *items)

    def json_bytes(self) -> int:
        """Size of the values as JSON."""
        return len(orjson.dumps(self.values))


WRITE_CHUNK = 1000
"""Keys per batch when a whole memory is written."""


def write_keys(mem: AgentMemory, items: list[tuple[str, bytes]]) -> None:
    """Write (key name, value) strings into working memory, as atomic batches."""
    for i in range(0, len(items), WRITE_CHUNK):
        with mem.batch() as b:
            for name, value in items[i : i + WRITE_CHUNK]:
                b.set(name, value)


class BenchAgent(BaseAgent):
    """A minimal agent whose state (interim results) is the payload."""

    agent_type = "bench_agent"
    version = "1.0"
    subtasks = ("gather", "analyse", "report")

    def run_subtask(self, name: str) -> Any:
        return None


def make_agent(stack: Stack, payload: Payload | None, write_l1: bool = True) -> BenchAgent:
    """A fresh agent (new analysis and agent id) holding ``payload`` in its working memory.

    As in a real agent, the bulk lives in working memory; the checkpoint's interim
    results are a small deliverable summary.
    """
    mem = stack.memory(BaseAgent.new_agent_id(BenchAgent.agent_type))
    agent = BenchAgent(str(uuid.uuid4()), "BNCH", mem)
    if payload is not None:
        agent.interim_results = {"gather": {"values": len(payload.values), "status": "ok"}}
        if write_l1:
            payload.write_l1(mem)
    return agent


# -- engines -----------------------------------------------------------------------------
@dataclass
class Engines:
    stack: Stack
    redis_url: str
    database_url: str
    admin_url: str
    embedded: bool
    data_dir: Path
    prefix: str
    opened: list[Stack] = field(default_factory=list)
    """Stacks opened by :meth:`connect`, closed and their keys removed at the end."""

    def connect(self, durability: str, tag: str = "", **settings: Any) -> Stack:
        """Another amber on the same servers and database, in ``durability`` mode; with
        ``tag``, under a key prefix of its own (``<prefix>-<tag>``)."""
        stack = amber.connect(
            self.redis_url,
            self.database_url,
            data_dir=self.data_dir,
            prefix=f"{self.prefix}-{tag}" if tag else self.prefix,
            durability=durability,
            **settings,
        )
        self.opened.append(stack)
        return stack


def delete_prefix(client: redis.Redis, prefix: str) -> int:
    """Delete every key under ``prefix``; return how many there were."""
    found = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for i in range(0, len(found), 500):
        client.delete(*found[i : i + 500])
    return len(found)


@contextlib.contextmanager
def engines(tag: str) -> Iterator[Engines]:
    """amber on a database and key prefix of its own, removed afterwards.

    ``AMBER_REDIS_URL`` / ``AMBER_DATABASE_URL`` if set, else embedded servers in a
    temporary directory (stopped and deleted at the end).
    """
    redis_url = os.environ.get("AMBER_REDIS_URL")
    admin_url = os.environ.get("AMBER_DATABASE_URL")
    data_dir = Path(tempfile.mkdtemp(prefix=f"amber-{tag}-"))
    started = not (redis_url and admin_url)
    run = uuid.uuid4().hex[:10]
    prefix, dbname = f"bench-{run}", f"amber_bench_{run}"
    eng: Engines | None = None
    created_db = False
    try:
        if started:
            urls = ensure_embedded(data_dir, redis=not redis_url, postgres=not admin_url)
            redis_url = redis_url or urls["redis"]
            admin_url = admin_url or urls["postgres"]
        assert redis_url and admin_url
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        created_db = True
        database_url = make_conninfo(admin_url, dbname=dbname)
        stack = amber.connect(redis_url, database_url, data_dir=data_dir, prefix=prefix)
        eng = Engines(stack, redis_url, database_url, admin_url, started, data_dir, prefix)
        yield eng
    finally:
        if eng is not None:
            for s in [eng.stack, *eng.opened]:
                delete_prefix(s.redis, s.keys.prefix)
                s.close()
        if created_db and admin_url:
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        if started:
            stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def server_processes(eng: Engines) -> dict[str, list[psutil.Process]] | None:
    """The embedded Redis server and PostgreSQL postmaster of ``eng`` (None when the
    servers are not this run's own): whose CPU time :func:`cpu_seconds` reads."""
    if not eng.embedded:
        return None
    found: dict[str, list[psutil.Process]] = {"redis": [], "postgresql": []}
    for p in psutil.process_iter(["name", "cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if str(eng.data_dir) in line:
            found["redis" if "redis-server" in line else "postgresql"].append(p)
    return found if all(found.values()) else None


def cpu_seconds(procs: Iterable[psutil.Process], children: bool = False) -> float:
    """User and system CPU time of ``procs`` (with ``children``: and of every process
    they started that is still running, as PostgreSQL's backends)."""
    total = 0.0
    for p in procs:
        group = [p, *p.children(recursive=True)] if children else [p]
        for q in group:
            with contextlib.suppress(psutil.Error):
                t = q.cpu_times()
                total += t.user + t.system
    return total


def pg_setting(stack: Stack, name: str) -> str:
    """A PostgreSQL setting as one of ``stack``'s connections sees it."""
    with stack.pg.connection() as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0]) if row else "?"


LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
"""PostgresSaver's tables."""


def analyze(stack: Stack, *tables: str) -> None:
    """Fresh statistics on ``tables``, as autovacuum would give them, before reads are
    timed: a plan made before a thread or an agent was written (or after, for one side
    only, when autovacuum happened to come between) is not what either side runs."""
    with stack.pg.connection() as conn:
        for name in tables:
            conn.execute(f"ANALYZE {name}")


def commit_floor(stack: Stack) -> Callable[[int], None]:
    """An op inserting one small row and committing it on ``stack``'s pool: the least any
    write durable in PostgreSQL costs (a table of its own in the bench's database)."""
    with stack.pg.connection() as conn, conn.transaction():
        # CREATE TABLE IF NOT EXISTS is not safe against itself (UniqueViolation on the
        # sequence): processes making the table at once take turns
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('bench_commit_floor'))")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_floor (id BIGSERIAL PRIMARY KEY,"
                     " v BIGINT)")  # fmt: skip

    def commit(i: int) -> None:
        with stack.pg.connection() as conn:
            conn.execute("INSERT INTO bench_commit_floor (v) VALUES (%s)", (i,))

    return commit


def redis_pg_floor(
    stack: Stack, commit: Callable[[int], None]
) -> Callable[[list[tuple[str, bytes]]], None]:
    """An op writing (name, value) pairs to Redis in one round trip (plain ``SET`` s in a
    pipeline, no script, under ``stack``'s key prefix), then ``commit`` (an op of
    :func:`commit_floor`): the least a save costs whose working memory lives in Redis
    and whose durability comes from PostgreSQL."""
    base = f"{stack.keys.prefix}:floor:"

    def write_and_commit(items: list[tuple[str, bytes]]) -> None:
        pipe = stack.redis.pipeline(transaction=False)
        for name, value in items:
            pipe.set(base + name, value)
        pipe.execute()
        commit(0)

    return write_and_commit


_WRITE_WITH_TTL = """
-- every key with its value and a TTL: one MSET per 500 keys, then a PEXPIRE each
-- KEYS the keys; ARGV[1] the TTL in ms; ARGV[2 ..] the values, aligned with KEYS
local pairs = {}
for i = 1, #KEYS do
  pairs[#pairs + 1] = KEYS[i]
  pairs[#pairs + 1] = ARGV[i + 1]
end
for j = 1, #pairs, 1000 do
  redis.call('MSET', unpack(pairs, j, math.min(j + 999, #pairs)))
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
return #KEYS
"""


def restore_floor(stack: Stack, analysis_id: str, agent_type: str) -> Callable[[int], None]:
    """An op reading an agent's newest working memory from PostgreSQL (the rows of its
    snapshot chain, decompressed, decoded and applied in order, nothing checked) and
    writing every key back to Redis with the active TTL in one script (``MSET`` and a
    ``PEXPIRE`` each, the cheapest form measured), under a prefix of its own in
    ``stack``'s: the least any restore of working memory from PostgreSQL into Redis costs,
    before it verifies, indexes or fences anything. String values only."""
    from amber import codec
    from amber.memory.chain import chain_rows

    script = stack.redis.register_script(_WRITE_WITH_TTL)
    base = f"{stack.keys.prefix}:{{floor}}:"  # one slot, as an agent's keys are

    def restore(i: int) -> None:
        with stack.pg.connection() as conn:
            rows = chain_rows(conn, analysis_id, agent_type, 2**62)
        keys: dict[str, Any] = {}
        for row in rows:
            doc = codec.decode_document(codec.unpack(row[1], row[2]))
            if row[6] is None:
                keys = doc["keys"]
            else:
                for name in doc["del"]:
                    keys.pop(name, None)
                keys.update(doc["set"])
        names = list(keys)
        values = [keys[n]["value"] for n in names]
        assert all(keys[n]["type"] == "string" for n in names)
        script(keys=[base + n for n in names], args=[stack.settings.active_ttl * 1000, *values])

    return restore


# -- timing -----------------------------------------------------------------------------
@dataclass
class Stats:
    n: int
    p50: float
    p99: float
    ops: float
    """Operations per second over the whole series (n / sum of times)."""


def stats(samples_ms: list[float]) -> Stats:
    s = sorted(samples_ms)
    n = len(s)
    p50 = (s[(n - 1) // 2] + s[n // 2]) / 2
    p99 = s[max(0, math.ceil(0.99 * n) - 1)]
    return Stats(n, p50, p99, 1000.0 * n / sum(s))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Milliseconds one call of ``fn`` took, and its result."""
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def series(
    ops: dict[str, Callable[[int], Any]],
    n: int,
    before: Callable[[int], Any] | None = None,
    warmup: int = 3,
    budget_s: float | None = None,
    collect: bool = False,
    before_each: Callable[[int], Any] | None = None,
) -> dict[str, list[float]]:
    """Time each op ``n`` times, interleaved round by round (the order rotates each round,
    so machine noise hits every contender alike). ``before(i)`` runs untimed first in a
    round, ``before_each(i)`` untimed before each op (so no op finds another's leavings).
    Stops early once ``budget_s`` seconds have passed (at least 5 timed rounds).

    ``collect``: Python's garbage is collected, untimed, before every op. Where ops
    allocate a lot (a 10,000-key memory), a full collection comes every few ops and
    costs as much as one: without this, the op that happens to trigger it pays for the
    garbage of the others, and which one that is depends on how much each allocates."""
    names = list(ops)
    out: dict[str, list[float]] = {k: [] for k in names}
    start = time.perf_counter()
    gc.collect()
    for i in range(-warmup, n):
        if before is not None:
            before(i)
        k = i % len(names)
        for name in names[k:] + names[:k]:
            if before_each is not None:
                before_each(i)
            if collect:
                gc.collect()
            ms, _ = timed(lambda name=name, i=i: ops[name](i))
            if i >= 0:
                out[name].append(ms)
        if budget_s is not None and i >= 4 and time.perf_counter() - start > budget_s:
            break
    return out


# -- output -----------------------------------------------------------------------------
def header(title: str, eng: Engines, extra: dict[str, str] | None = None) -> None:
    """Print the command, the machine and every version that matters."""
    server = eng.stack.server_versions()
    load = os.getloadavg()
    print(f"# {title}")
    print(f"command:    {shlex.join(sys.orig_argv)}   (cwd {os.getcwd()})")
    print(f"date:       {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"machine:    nproc={os.cpu_count()} ({_cpu_model()}), {platform.platform()}, "
          f"load avg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    print(f"python:     {platform.python_implementation()} {platform.python_version()}")
    print(f"amber:      {_amber_source()}")
    print("packages:   " + ", ".join(f"{p} {_version(p)}" for p in PACKAGES))
    print(f"servers:    redis-server {server['redis']}, PostgreSQL {server['postgresql']} "
          f"({'embedded, unix sockets' if eng.embedded else 'external'})")  # fmt: skip
    print(f"redis:      {redact(eng.stack.redis_url)}")
    print(f"postgresql: {redact(eng.database_url)}")
    print(f"pg commit:  synchronous_commit={pg_setting(eng.stack, 'synchronous_commit')}, "
          f"fsync={pg_setting(eng.stack, 'fsync')}")  # fmt: skip
    for k, v in (extra or {}).items():
        print(f"{k + ':':<11} {v}")
    print()


def _amber_source() -> str:
    """Where the imported amber comes from, and its git commit (``+dirty``: uncommitted
    changes under it); PYTHONPATH decides which tree that is."""
    where = Path(amber.__file__).resolve().parent
    git = ["git", "-C", str(where)]
    try:
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    rev = f" (git {commit}{'+dirty' if dirty else ''})" if commit else ""
    return f"{where}{rev}"


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


TABLE_HEADER = ("operation", "n", "p50 ms", "p99 ms", "ops/s", "ratio", "vs", "goal", "met")


@dataclass
class Row:
    operation: str
    st: Stats
    ratio: float | None = None
    vs: str = ""
    goal: str = ""
    met: bool | None = None


def table(rows: list[Row | str]) -> None:
    """One plain-text table of :class:`Row`; a str row is a section line."""
    print_table(TABLE_HEADER, [
        (r.operation, str(r.st.n), f"{r.st.p50:.3f}", f"{r.st.p99:.3f}", f"{r.st.ops:,.0f}",
         "" if r.ratio is None else f"{r.ratio:.2f}x", r.vs, r.goal,
         "" if r.met is None else ("yes" if r.met else "NO"))
        if isinstance(r, Row) else r
        for r in rows
    ], right={1, 2, 3, 4, 5})  # fmt: skip


def print_table(head: tuple[str, ...], rows: list[tuple[str, ...] | str], right: set[int]) -> None:
    """A plain-text table: ``rows`` of cells under ``head`` (a str row is a section line);
    columns in ``right`` are right-aligned."""
    widths = [len(h) for h in head]
    for c in rows:
        if not isinstance(c, str):
            widths = [max(w, len(x)) for w, x in zip(widths, c, strict=True)]

    def fmt(c: tuple[str, ...]) -> str:
        return "  ".join(
            x.rjust(w) if i in right else x.ljust(w)
            for i, (x, w) in enumerate(zip(c, widths, strict=True))
        ).rstrip()

    line = fmt(head)
    print(line)
    print("-" * len(line))
    for c in rows:
        print(f"[{c}]" if isinstance(c, str) else fmt(c))
    print()


def have_langgraph() -> bool:
    """Whether LangGraph's PostgreSQL saver is installed (the ``bench`` extra)."""
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError:
        return False
    return True


def quick_flag() -> bool:
    return "--quick" in sys.argv[1:]
