"""Who may read and change through ``amber serve``: tokens, hosts, origins, cookies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import amber
from amber.errors import ConfigError
from amber.web.auth import COOKIE, Guard

from .conftest import Served, serving

TOKEN = "operator-token-0123456789"


def test_a_change_without_the_token_or_with_a_bad_one_is_refused(served: Served) -> None:
    body = {"definition": "reviewed"}
    assert served.client.post("/api/analyses", json=body).status_code == 401
    bad = served.client.post("/api/analyses", json=body, headers={"X-Amber-Token": "nope"})
    assert bad.status_code == 401 and "token" in bad.json()["error"]
    bearer = served.client.post(
        "/api/analyses", json=body, headers={"Authorization": f"Bearer {served.token}x"}
    )
    assert bearer.status_code == 401
    ok = served.client.post(
        "/api/analyses", json=body, headers={"Authorization": f"Bearer {served.token}"}
    )
    assert ok.status_code == 201


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1:1"},  # another port on localhost is another origin
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_a_change_from_another_origin_is_refused_even_with_the_token(
    served: Served, headers: dict[str, str]
) -> None:
    response = served.change("/api/analyses", {"definition": "reviewed"}, **headers)
    assert response.status_code == 403 and "own pages" in response.json()["error"]


def test_same_origin_changes_pass(served: Served) -> None:
    origin = f"http://127.0.0.1:{served.port}"
    response = served.change(
        "/api/analyses",
        {"definition": "reviewed"},
        Origin=origin,
        **{"Sec-Fetch-Site": "same-origin"},
    )
    assert response.status_code == 201


def test_no_preflight_is_answered_and_no_cors_header_is_sent(served: Served) -> None:
    pre = served.client.options(
        "/api/analyses",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert pre.status_code == 405
    got = served.client.get("/api/analyses", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in got.headers
    assert got.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in got.headers["content-security-policy"]


def test_an_unknown_host_is_refused_against_dns_rebinding(served: Served) -> None:
    for path in ("/", "/api/analyses", "/metrics"):
        response = served.client.get(path, headers={"Host": f"rebound.example:{served.port}"})
        assert response.status_code == 421
    assert served.client.get("/", headers={"Host": f"localhost:{served.port}"}).status_code == 200


def test_the_page_carries_the_token_only_to_its_own_origin(served: Served) -> None:
    page = served.client.get("/").text
    assert f'name="amber-token" content="{served.token}"' in page


def test_binding_beyond_loopback_needs_a_configured_token() -> None:
    with pytest.raises(ConfigError, match="AMBER_SERVE_TOKEN"):
        Guard.build(None, "0.0.0.0", 8765)
    assert Guard.build(TOKEN, "0.0.0.0", 8765).configured
    made = Guard.build(None, "127.0.0.1", 8765)
    assert not made.configured and len(made.token) >= 32
    assert made.token != Guard.build(None, "127.0.0.1", 8765).token


@pytest.fixture(scope="module")
def guarded(stack: amber.Stack) -> Iterator[Served]:
    stack.settings.serve_token = TOKEN  # as AMBER_SERVE_TOKEN would
    try:
        with serving(stack, workers=0) as s:
            yield s
    finally:
        stack.settings.serve_token = None


def test_with_a_configured_token_reads_need_it_too(guarded: Served) -> None:
    c = guarded.client
    assert guarded.token == TOKEN
    assert c.get("/api/analyses").status_code == 401
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    login_page = c.get("/").text
    assert "Sign in" in login_page and TOKEN not in login_page


def test_login_gives_a_cookie_for_reads_never_for_changes(guarded: Served) -> None:
    with httpx.Client(base_url=guarded.url) as c:
        assert c.post("/api/login", json={"token": "wrong-token-000000"}).status_code == 401
        assert COOKIE not in c.cookies
        ok = c.post("/api/login", json={"token": TOKEN})
        assert ok.status_code == 200
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert TOKEN.lower() not in cookie
        assert c.get("/api/analyses").status_code == 200
        assert f'content="{TOKEN}"' in c.get("/").text
        refused = c.post("/api/analyses", json={"definition": "reviewed"})
        assert refused.status_code == 401


def test_amber_serve_refuses_to_bind_beyond_loopback_without_a_token(engines: Any) -> None:
    from typer.testing import CliRunner

    from amber.cli import app

    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code == 1
    assert "AMBER_SERVE_TOKEN" in result.output
