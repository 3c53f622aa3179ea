"""Engines: connecting, clear errors, embedded servers shared between processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

import amber
from amber import AnalysisNotFound, ConfigError, StoreUnavailable, defaults
from amber.cli import app
from amber.engines.connect import open_redis, redact
from amber.engines.embedded import _alive, embedded_state, ensure_embedded, stop_embedded
from amber.persistence import PersistenceManager

from .conftest import Engines, on_cluster

STATE_SCRIPT = """
import json, sys
from pathlib import Path
from amber.engines.embedded import ensure_embedded, embedded_state
ensure_embedded(Path(sys.argv[1]))
print(json.dumps({s.name: s.pid for s in embedded_state(Path(sys.argv[1]))}), flush=True)
"""


def test_connect_uses_given_urls(stack: amber.Stack, engines: Engines) -> None:
    assert stack.redis.ping()
    assert stack.redis_url == engines.redis_url
    assert stack.schema_version() >= 1
    versions = stack.server_versions()
    assert versions["redis"] and versions["postgresql"]


def test_unreachable_redis_is_a_clear_error_not_a_hang(engines: Engines) -> None:
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match="Redis did not answer") as info:
        amber.connect("redis://:secret@127.0.0.1:1/0", engines.database_url, connect_timeout=1)
    assert time.monotonic() - t0 < 30
    assert "secret" not in str(info.value)


def test_unreachable_postgres_is_a_clear_error(engines: Engines) -> None:
    with pytest.raises(StoreUnavailable, match="PostgreSQL did not answer") as info:
        amber.connect(engines.redis_url, "postgresql://u:hunter2@127.0.0.1:1/x", connect_timeout=1)
    assert "hunter2" not in str(info.value)


def test_malformed_url_is_a_clear_error(engines: Engines) -> None:
    with pytest.raises(ConfigError, match="accepted: redis://"):
        amber.connect("ftp://nowhere", engines.database_url, connect_timeout=1)
    with pytest.raises(StoreUnavailable):
        amber.connect("redis://nowhere:x", engines.database_url, connect_timeout=1)


def test_redact() -> None:
    assert redact("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert redact("unix:///tmp/r.sock") == "unix:///tmp/r.sock"


def test_zombie_counts_as_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while True:  # exited but not reaped: a zombie
        try:
            with open(f"/proc/{child.pid}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.01)
    assert not _alive(child.pid)
    child.wait()
    assert not _alive(None)


@pytest.fixture
def fresh_dir(tmp_path: Path) -> Path:
    data = tmp_path / "d"
    yield data
    stop_embedded(data)


def test_two_processes_starting_at_once_share_one_of_each(fresh_dir: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STATE_SCRIPT, str(fresh_dir)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] and outs[0]["redis"] and outs[0]["postgresql"]


def test_killed_holder_leaves_servers_that_are_found_and_stopped(fresh_dir: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", STATE_SCRIPT + "\nimport time; time.sleep(60)", str(fresh_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    pids = json.loads(holder.stdout.readline())
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    states = {s.name: s for s in embedded_state(fresh_dir)}
    assert states["redis"].pid == pids["redis"] and states["postgresql"].running
    with amber.connect(data_dir=fresh_dir, redis_url="", database_url="") as s:
        assert s.redis.ping()
    assert embedded_state(fresh_dir)[0].pid == pids["redis"]  # reused, not restarted
    assert sorted(stop_embedded(fresh_dir)) == ["postgresql", "redis"]
    assert not any(s.running for s in embedded_state(fresh_dir))
    assert not _alive(pids["redis"]) and not _alive(pids["postgresql"])


def test_cli_status_and_down(fresh_dir: Path) -> None:
    runner = CliRunner()
    env = {"AMBER_REDIS_URL": "", "AMBER_DATABASE_URL": "", "AMBER_DATA_DIR": str(fresh_dir)}
    result = runner.invoke(app, ["status"], env=env)
    assert result.exit_code == 0 and "stopped" in result.output
    ensure_embedded(fresh_dir)
    result = runner.invoke(app, ["status"], env=env)
    assert result.exit_code == 0, result.output
    assert "running" in result.output and "schema version" in result.output
    result = runner.invoke(app, ["down"], env=env)
    assert "stopped" in result.output and "redis" in result.output
    result = runner.invoke(app, ["status"], env=env)
    assert "running" not in result.output


def test_cli_reports_unreachable_engine_cleanly(engines: Engines) -> None:
    result = CliRunner().invoke(
        app, ["--redis-url", "redis://127.0.0.1:1/0", "status"], env={"AMBER_CONNECT_TIMEOUT": "1"}
    )
    assert result.exit_code == 1
    assert "error:" in result.output and "Traceback" not in result.output


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:  # free a moment ago: nobody listens on it
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    with socket.socket() as s:  # the kernel completes connections, nobody ever answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def _fails_fast(redis_url: str, database_url: str, match: str, **settings: object) -> float:
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match=match):
        amber.connect(redis_url, database_url, **settings)
    return time.monotonic() - t0


def test_dead_redis_fails_within_the_default_connect_timeout(
    engines: Engines, closed_port: int, silent_port: int, tmp_path: Path
) -> None:
    assert defaults.CONNECT_TIMEOUT == 1.0
    for url in (
        f"redis://127.0.0.1:{closed_port}/0",
        f"unix://{tmp_path}/no-such.sock",
        f"redis://127.0.0.1:{silent_port}/0",  # used to wait 10 s per attempt
    ):
        assert _fails_fast(url, engines.database_url, "Redis did not answer") < 5, url


def test_dead_postgres_fails_under_libpq_floor(
    engines: Engines, closed_port: int, silent_port: int, tmp_path: Path
) -> None:
    for url in (
        f"postgresql://u@127.0.0.1:{closed_port}/x",
        f"postgresql://u@/x?host={tmp_path}",  # no socket in that directory
        f"postgresql://u@127.0.0.1:{silent_port}/x",  # libpq alone would wait 2 s
    ):
        elapsed = _fails_fast(
            engines.redis_url, url, "PostgreSQL did not answer", connect_timeout=0.3
        )
        assert elapsed < 1.5, url
    silent = f"postgresql://u@127.0.0.1:{silent_port}/x"
    assert _fails_fast(engines.redis_url, silent, "PostgreSQL did not answer") < 5


@pytest.mark.skipif(on_cluster(), reason="reads the single-server client's connection pool")
def test_slow_lua_script_is_not_cut_off_by_the_connect_timeout(engines: Engines) -> None:
    client = open_redis(engines.redis_url, 0.2, command_timeout=5)
    try:
        assert client.connection_pool.connection_kwargs["socket_timeout"] == 5
        busy = "local t = redis.call('TIME') local n repeat n = redis.call('TIME') until (n[1] - t[1]) * 1000000 + n[2] - t[2] > 600000 return 1"  # noqa: E501
        assert client.eval(busy, 0) == 1  # 0.6 s: three times the connect timeout
    finally:
        client.close()


@pytest.mark.skipif(on_cluster(), reason="reads the single-server client's connection pool")
async def test_command_timeout_setting_reaches_the_persistence_manager(engines: Engines) -> None:
    async with PersistenceManager(engines.redis_url, prefix=engines.prefix) as pm:
        kwargs = pm.redis.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == defaults.COMMAND_TIMEOUT
        assert kwargs["socket_connect_timeout"] == defaults.CONNECT_TIMEOUT


@pytest.mark.skipif(on_cluster(), reason="reads the single-server client's connection pool")
def test_command_timeout_setting_reaches_the_stack(engines: Engines) -> None:
    with amber.connect(engines.redis_url, engines.database_url, command_timeout=7) as stack:
        assert stack.redis.connection_pool.connection_kwargs["socket_timeout"] == 7


def test_the_command_line_starts_without_the_engines() -> None:
    # `amber --help` starts fast because no command module imports a driver until it runs
    code = (
        "import sys, amber.cli; heavy = {'psycopg', 'redis', 'pydantic_settings', 'zstandard',"
        " 'amber.stack', 'amber.persistence', 'asyncio'} & set(sys.modules);"
        " print(sorted(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_a_command_says_when_it_started_servers_and_where(fresh_dir: Path) -> None:
    runner = CliRunner()
    env = {"AMBER_REDIS_URL": "", "AMBER_DATABASE_URL": "", "AMBER_DATA_DIR": str(fresh_dir)}
    first = runner.invoke(app, ["analyses", "list", "--json"], env=env)
    assert first.exit_code == 0, first.output
    said = f"amber: started embedded Redis and PostgreSQL under {fresh_dir.resolve()}"
    assert said in first.stderr
    again = runner.invoke(app, ["analyses", "list", "--json"], env=env)
    assert again.exit_code == 0 and "started embedded" not in again.stderr  # running now


def test_the_data_directory_is_found_as_git_finds_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command run in a subdirectory of a project uses the project's ``.amber``, not a
    new one of its own; with none above, ``./.amber``."""
    from amber.config import find_data_dir, load_settings

    project = tmp_path / "project"
    (project / ".amber").mkdir(parents=True)
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    assert find_data_dir(deep) == project / ".amber"
    assert find_data_dir(project) == Path(".amber")
    monkeypatch.delenv("AMBER_DATA_DIR", raising=False)
    monkeypatch.chdir(deep)
    assert load_settings().data_dir == project / ".amber"


def _end_backend(database_url: str, pid: int) -> None:
    """End backend ``pid`` as a restart or an idle timeout would, and wait until it is gone."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.02)


def test_connections_the_server_ended_while_idle_are_replaced_before_they_are_used(
    engines: Engines,
) -> None:
    """The server ended every connection of the pool while they sat idle (a restart, a
    proxy, ``pg_terminate_backend``): the next calls are served by new connections
    instead of failing with ``StoreUnavailable``."""
    prefix = f"{engines.prefix}-ended-{uuid.uuid4().hex[:6]}"
    with amber.connect(
        engines.redis_url, engines.database_url, prefix=prefix, pg_pool_max=3
    ) as stack:
        with stack.pg.connection() as a, stack.pg.connection() as b, stack.pg.connection() as c:
            before = {a.info.backend_pid, b.info.backend_pid, c.info.backend_pid}
        for pid in before:
            _end_backend(engines.database_url, pid)
        for _ in range(3):
            with pytest.raises(AnalysisNotFound):  # the statement ran: no such analysis
                stack.analyses.get(uuid.uuid4())
        with stack.pg.connection() as conn:
            assert conn.info.backend_pid not in before


def test_a_server_idle_session_timeout_does_not_fail_the_next_call(engines: Engines) -> None:
    """A server that ends idle sessions (``idle_session_timeout``, 1 s here) leaves the
    pool's connection ended between two calls: the second call still succeeds."""
    with psycopg.connect(engines.database_url) as conn:
        if conn.info.server_version < 140000:
            pytest.skip("idle_session_timeout is PostgreSQL 14's")
    url = make_conninfo(engines.database_url, options="-c idle_session_timeout=1000")
    prefix = f"{engines.prefix}-idle-{uuid.uuid4().hex[:6]}"
    with amber.connect(engines.redis_url, url, prefix=prefix, pg_pool_max=1) as stack:
        for _ in range(2):
            with stack.pg.connection() as conn:
                before = conn.info.backend_pid
            time.sleep(1.5)
            with pytest.raises(AnalysisNotFound):  # the statement ran: no such analysis
                stack.analyses.get(uuid.uuid4())
            with stack.pg.connection() as conn:  # the one connection the call used
                assert conn.info.backend_pid != before, "the server did not end the session"


def test_a_pooled_connection_left_in_a_transaction_is_committed_or_rolled_back(
    engines: Engines,
) -> None:
    """A block that ends with a transaction open commits it; one that raises rolls it
    back; either way the connection goes back to the pool idle, as psycopg's pool gives
    them back."""
    prefix = f"{engines.prefix}-tx-{uuid.uuid4().hex[:6]}"
    table = f"amber_test_tx_{uuid.uuid4().hex[:8]}"
    with amber.connect(
        engines.redis_url, engines.database_url, prefix=prefix, pg_pool_max=1
    ) as stack:
        with stack.pg.connection() as conn:
            conn.execute(f"CREATE TABLE {table} (n int)")
        try:
            with stack.pg.connection() as conn:
                conn.execute("BEGIN")
                conn.execute(f"INSERT INTO {table} VALUES (1)")
            with pytest.raises(ZeroDivisionError), stack.pg.connection() as conn:
                conn.execute("BEGIN")
                conn.execute(f"INSERT INTO {table} VALUES (2)")
                _ = 1 / 0
            with stack.pg.connection() as conn:
                assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
            with psycopg.connect(engines.database_url) as other:
                assert other.execute(f"SELECT n FROM {table}").fetchall() == [(1,)]
        finally:
            with stack.pg.connection() as conn:
                conn.execute(f"DROP TABLE {table}")


def test_a_deferred_redis_command_that_cannot_be_packed_sends_nothing(
    stack: amber.Stack,
) -> None:
    """``Pending.send_now`` with an argument Redis's protocol has no form for raises
    ``redis.DataError`` as redis-py would, sends nothing, and gives the connection back."""
    import redis

    from amber.engines.later import Pending

    pending = Pending.hold(stack.redis)
    if pending is None:
        pytest.skip("a cluster client holds no connection")
    pool = stack.redis.connection_pool
    with pytest.raises(redis.DataError):
        pending.send_now([("SET", f"{stack.keys.prefix}:never", None)])
    assert pending.done
    assert stack.redis.exists(f"{stack.keys.prefix}:never") == 0
    assert pending.conn in pool._available_connections
