"""A local PostgreSQL primary and a synchronous streaming standby, from the binaries amber
ships (``pgserver``: ``initdb``, ``pg_basebackup``, ``pg_ctl``), for failover tests.

On free loopback ports, in a temporary directory, torn down afterwards::

    with PgPair() as pair:     # pair.url: postgresql://...@h:p1,h:p2/amber?target_session_attrs=read-write
        ...
        pair.kill_primary()    # SIGKILL of the primary's postmaster
        pair.promote()         # the standby becomes the primary

Every commit the primary acknowledges is on the standby first (``synchronous_commit=on``
with the standby named in ``synchronous_standby_names``): nothing acknowledged is lost
when the standby is promoted.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psycopg

from amber.engines.embedded import _make_traversable, _pg_bin, _pg_user

HOST = "127.0.0.1"
DATABASE = "amber"
STANDBY = "standby1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class PgPair:
    """A primary and a synchronous standby on loopback ports (see the module's doc)."""

    def __init__(self, base: Path | None = None) -> None:
        self._own_dir = base is None
        self.base = Path(tempfile.mkdtemp(prefix="amber-pgpair-")) if base is None else base
        self.ports = [_free_port(), _free_port()]
        self.dirs = [self.base / "primary", self.base / "standby"]
        self.user = _pg_user()
        self.promoted = False

    # -- the URLs ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Both hosts, libpq picking whichever accepts writes."""
        hosts = ",".join(f"{HOST}:{p}" for p in self.ports)
        return f"postgresql://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write"

    def server_url(self, i: int, database: str = DATABASE) -> str:
        """One server's URL (0: the first primary, 1: the standby)."""
        return f"postgresql://postgres@{HOST}:{self.ports[i]}/{database}"

    # -- running the tools as the postgres user ----------------------------------------------
    def _run(self, tool: str, *args: str) -> None:
        as_user: dict[str, Any] = (
            {"user": self.user, "group": self.user, "extra_groups": []} if self.user else {}
        )
        subprocess.run(
            [str(_pg_bin() / tool), *args], check=True, capture_output=True, timeout=60, **as_user
        )

    def _own(self, path: Path) -> None:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _conf(self, i: int, lines: list[str]) -> None:
        # postgresql.auto.conf is read last: what is appended there wins (pg_basebackup -R
        # writes its own primary_conninfo into it)
        with open(self.dirs[i] / "postgresql.auto.conf", "a") as f:
            f.write("\n" + "\n".join(lines) + "\n")

    def _start(self, i: int) -> None:
        self._run("pg_ctl", "-D", str(self.dirs[i]), "-w", "-l", str(self.dirs[i] / "log"), "start")

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Self:
        """Init the primary, clone the standby from it, start both, wait for sync."""
        if self.user is not None:
            _make_traversable(self.base)
            _make_traversable(_pg_bin())
        self._own(self.dirs[0])
        self._run("initdb", "-D", str(self.dirs[0]), "--auth=trust", "-U", "postgres")
        self._conf(
            0,
            [
                f"listen_addresses = '{HOST}'",
                f"port = {self.ports[0]}",
                f"unix_socket_directories = '{self.dirs[0]}'",
                "max_connections = 200",
                "wal_level = replica",
                "max_wal_senders = 5",
                "synchronous_commit = on",
            ],
        )
        self._start(0)
        with psycopg.connect(self.server_url(0, "postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        self._own(self.dirs[1])
        self._run(
            "pg_basebackup",
            "-h", HOST, "-p", str(self.ports[0]), "-U", "postgres",
            "-D", str(self.dirs[1]), "-X", "stream", "-R", "-c", "fast",
        )  # fmt: skip
        self._conf(
            1,
            [
                f"port = {self.ports[1]}",
                f"unix_socket_directories = '{self.dirs[1]}'",
                "synchronous_standby_names = ''",  # promoted, it waits for no one
                f"primary_conninfo = 'host={HOST} port={self.ports[0]} user=postgres"
                f" application_name={STANDBY}'",
            ],
        )
        self._start(1)
        with psycopg.connect(self.server_url(0, "postgres"), autocommit=True) as conn:
            # named only now: a commit waits for the standby named, and before it ran
            # there was none (the database above, the base backup's own writes)
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'")
            conn.execute("SELECT pg_reload_conf()")
        self.wait_sync()
        return self

    def wait_sync(self, timeout: float = 30.0) -> None:
        """Until the primary names the standby its synchronous one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(self.server_url(0, "postgres"), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY,),
                ).fetchone()
            if row and row[0] == "sync":
                return
            time.sleep(0.2)
        raise TimeoutError("the standby did not become synchronous")

    def pid(self, i: int) -> int | None:
        """The postmaster pid of server ``i``, if it runs."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.dirs[i] / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
            return pid
        return None

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster (its backends notice and exit)."""
        pid = self.pid(0)
        assert pid is not None, "the primary is not running"
        os.kill(pid, signal.SIGKILL)

    def promote(self) -> None:
        """Make the standby the primary."""
        self._run("pg_ctl", "-D", str(self.dirs[1]), "-w", "promote")
        self.promoted = True

    def stop(self) -> None:
        """Stop both servers (whatever is left of them) and remove the directory."""
        for i in (0, 1):
            pid = self.pid(i)
            if pid is None:
                continue
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run("pg_ctl", "-D", str(self.dirs[i]), "-w", "-m", "immediate", "stop")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._own_dir and not os.environ.get("PGPAIR_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
