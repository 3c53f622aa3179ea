"""``amber serve`` on a free port, in a thread, against the suite's servers, with a worker
of the test app (``tests.web.apps``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

import amber

pytest.importorskip("fastapi", reason="the web extra is not installed: pip install 'amber[web]'")

import httpx
import uvicorn

from amber.web.server import build

from . import apps

T = TypeVar("T")


@dataclass
class Served:
    """A running server: its base URL, its token and an HTTP client on it."""

    url: str
    port: int
    token: str
    client: httpx.Client

    def change(self, path: str, body: Any = None, **headers: str) -> httpx.Response:
        """POST with the token, as the dashboard does."""
        sent = {"X-Amber-Token": self.token, **headers}
        return self.client.post(path, json=body if body is not None else {}, headers=sent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(stack: amber.Stack, workers: int = 2, **settings: Any) -> Iterator[Served]:
    """Run ``amber serve``'s application for ``stack`` in a thread until the block ends."""
    port = free_port()
    web, guard = build(stack, apps.app, "127.0.0.1", port, workers=workers)
    server = uvicorn.Server(uvicorn.Config(web, "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="amber-serve-test", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: server.started, what="the server to start")
        with httpx.Client(base_url=url, timeout=30) as client:
            yield Served(url, port, guard.token, client)
    finally:
        server.should_exit = True
        thread.join(60)


def wait_until(check: Callable[[], T], timeout: float = 60.0, what: str = "the condition") -> T:
    """Poll ``check`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def served(stack: amber.Stack) -> Iterator[Served]:
    with serving(stack) as s:
        yield s


@pytest.fixture
def market() -> Iterator[Any]:
    """The test app's market, its ledger empty and its quota set for the test."""
    apps.MARKET.ledger.clear()
    apps.MARKET.set_quota("koyfin", apps.KOYFIN_QUOTA)
    yield apps.MARKET
    apps.MARKET.set_quota("koyfin", apps.KOYFIN_QUOTA)


def status_of(served: Served, aid: str) -> dict[str, Any]:
    """The analysis as the API shows it."""
    response = served.client.get(f"/api/analyses/{aid}")
    assert response.status_code == 200, response.text
    shown: dict[str, Any] = response.json()
    return shown
