"""A local Sentinel set (one primary, two replicas, three Sentinels) from the redis-server
amber ships.

On free loopback ports, in a temporary directory, torn down afterwards::

    with LocalSentinel() as s:         # s.url: redis+sentinel://127.0.0.1:port,.../amber
        ...
    python -m tests.sentinel up        # prints the URL; state in $SENTINEL_DIR
    python -m tests.sentinel down      # or /tmp/amber-sentinel
    python -m tests.sentinel run -- python -m pytest   # AMBER_REDIS_URL set for the command

The Sentinels call the primary down after ``DOWN_AFTER_MS`` without an answer and
promote a replica. ``LocalSentinel.kill(port)`` kills one server (SIGKILL) for
failover tests; ``wait_promoted`` waits until the Sentinels name a new primary.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from tests.cluster import BIN, HOST, LocalServers, command_line, free_ports

SERVICE = "amber"
"""The name the Sentinels give the primary (the URL's path)."""
DOWN_AFTER_MS = 1000
"""How long the primary may not answer before a Sentinel calls it down."""
FAILOVER_TIMEOUT_MS = 3000
"""How long a Sentinel waits on a failover before another may try again."""
QUORUM = 2
STATE = Path(os.environ.get("SENTINEL_DIR", Path(tempfile.gettempdir()) / "amber-sentinel"))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LocalSentinel(LocalServers):
    """A primary, its replicas and the Sentinels that watch them; ``url`` names the set."""

    def __init__(self, replicas: int = 2, sentinels: int = 3, root: Path | None = None) -> None:
        super().__init__(root)
        self.replicas = replicas
        self.sentinels = sentinels
        self.servers: list[int] = []
        """Ports of the data servers; the first started as the primary."""
        self.sentinel_ports: list[int] = []

    @property
    def url(self) -> str:
        """The amber URL of the set: every Sentinel, then the service name."""
        return f"redis+sentinel://{','.join(f'{HOST}:{p}' for p in self.sentinel_ports)}/{SERVICE}"

    def start(self) -> LocalSentinel:
        """Start the servers and Sentinels; wait until every Sentinel sees the whole set."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="amber-sentinel-"))
        ports = free_ports(1 + self.replicas + self.sentinels)
        self.servers = ports[: 1 + self.replicas]
        self.sentinel_ports = ports[1 + self.replicas :]
        primary = self.servers[0]
        try:
            for port in self.servers:
                follow = [] if port == primary else ["--replicaof", HOST, str(primary)]
                self._spawn(port, ["--port", str(port), *follow])
            for port in self.servers:
                self._wait_ping(port)
            self._wait_replicas(primary)
            for port in self.sentinel_ports:
                conf = self._dir(port) / "sentinel.conf"
                conf.write_text(
                    f"port {port}\nbind {HOST}\ndir {self._dir(port)}\n"
                    f"sentinel monitor {SERVICE} {HOST} {primary} {QUORUM}\n"
                    f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                    f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                    f"sentinel parallel-syncs {SERVICE} {self.replicas}\n"
                )
                self._spawn(port, [], config=conf)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _dir(self, port: int) -> Path:
        assert self.root is not None
        d = self.root / str(port)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _spawn(self, port: int, args: list[str], config: Path | None = None) -> None:
        d = self._dir(port)
        log = open(d / "redis.log", "wb")  # noqa: SIM115 - the child keeps it
        head = [str(BIN / "redis-server")]
        if config is not None:  # a Sentinel: it rewrites its config file as it learns
            head += [str(config), "--sentinel"]
        else:
            head += ["--bind", HOST, "--appendonly", "no", "--save", "", "--dir", str(d)]
        self.procs[port] = subprocess.Popen(
            [*head, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(HOST, port, socket_timeout=1, socket_connect_timeout=1)

    def _wait_ping(self, port: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._client(port).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _wait_replicas(self, primary: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError):
                info = self._client(primary).info("replication")
                online = [
                    v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                ]
                if sum(1 for v in online if v.get("state") == "online") >= self.replicas:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("the replicas did not sync with the primary")
            time.sleep(0.1)

    def _views(self) -> list[dict[str, Any]]:
        """Each live Sentinel's view of the service (an empty dict when it does not answer)."""
        views = []
        for port in self.sentinel_ports:
            if self.procs[port].poll() is not None:
                continue
            try:
                raw = self._client(port).execute_command("SENTINEL", "MASTER", SERVICE)
            except redis.RedisError:
                views.append({})
                continue
            if isinstance(raw, dict):
                views.append({_text(k): _text(v) for k, v in raw.items()})
            else:
                pairs = [_text(x) for x in raw]
                views.append(dict(zip(pairs[::2], pairs[1::2], strict=True)))
        return views

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until every live Sentinel sees a primary, the other Sentinels and every live
        replica."""
        deadline = time.monotonic() + timeout
        live_replicas = sum(1 for p in self.servers if self.procs[p].poll() is None) - 1
        while True:
            views = self._views()
            if views and all(
                v.get("flags") == "master"
                and int(v.get("num-other-sentinels", -1)) >= self.sentinels - 1
                and int(v.get("num-slaves", -1)) >= live_replicas
                for v in views
            ):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Sentinels did not agree on the set: {views}")
            time.sleep(0.1)

    def primary_port(self) -> int:
        """Port of the server the Sentinels name primary now."""
        for port in self.sentinel_ports:
            if self.procs[port].poll() is not None:
                continue
            with contextlib.suppress(redis.RedisError):
                addr = self._client(port).execute_command(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE
                )
                if addr:
                    return int(addr[1])
        raise RuntimeError("no Sentinel answered")

    def wait_promoted(self, old: int, timeout: float = 60) -> int:
        """Wait until every live Sentinel names a primary other than ``old`` that says it is
        one; return its port."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError, RuntimeError, ValueError):
                views = self._views()
                ports = {int(v["port"]) for v in views if v.get("flags") == "master"}
                if len(ports) == 1 and len(views) == self.sentinels and old not in ports:
                    port = ports.pop()
                    if _text(self._client(port).execute_command("ROLE")[0]) == "master":
                        return port
            if time.monotonic() > deadline:
                raise TimeoutError(f"no replica of {old} was promoted")
            time.sleep(0.1)

    def failover(self) -> None:
        """Ask a Sentinel to promote a replica now (the primary is demoted, not killed)."""
        self._client(self.sentinel_ports[0]).execute_command("SENTINEL", "FAILOVER", SERVICE)

    def wait_role(self, port: int, role: str, timeout: float = 60) -> None:
        """Wait until the server on ``port`` says it is a ``role`` (``master``, ``slave``)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(redis.RedisError):
                if _text(self._client(port).execute_command("ROLE")[0]) == role:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server on {port} did not become a {role}")
            time.sleep(0.1)


if __name__ == "__main__":
    command_line(lambda root: LocalSentinel(root=root), "sentinel", STATE, sys.argv[1:])
