"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

Screenshots of each view go to docs/images/ (docs/operations.md shows them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import amber
from amber.persistence import SyncPersistenceManager

from ..conftest import Engines
from . import apps
from .conftest import Served, status_of, wait_until

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update"]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    if executable is None:
        pytest.skip("chromium is not installed (make test installs it with apt-get)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 860})
    p = context.new_page()
    p.set_default_timeout(60_000)
    try:
        yield p
    finally:
        context.close()


def _shot(page: Any, name: str) -> None:
    """Take the page's screenshot; written into docs/images only with SCREENSHOTS=1 (the
    committed pictures are not rewritten by every test run)."""
    shot = page.screenshot(full_page=True)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        (IMAGES / name).write_bytes(shot)


def _confirm(page: Any, text: str | None = None) -> None:
    dialog = page.locator("dialog#confirm")
    dialog.wait_for(state="visible")
    if text is not None:
        page.locator("#confirm-input").fill(text)
    page.locator("#confirm-ok").click()
    dialog.wait_for(state="hidden")


def test_submit_pause_on_quota_resume_and_complete(served: Served, market: Any, page: Any) -> None:
    page.goto(served.url + "/")
    page.get_by_label("definition").select_option(apps.QUOTA)
    page.get_by_label("ticker").fill("AAPL")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/#/analysis/*")
    aid = page.url.rsplit("/", 1)[-1]
    page.locator(".toolbar .badge.paused").wait_for()
    page.get_by_text("quota_exhausted · since").wait_for()
    page.locator("[data-agent] .bar span", has_text="1 of 4").wait_for()
    _shot(page, "analysis-paused.png")

    market.set_quota("koyfin", None)
    page.get_by_role("button", name="Resume").click()
    _confirm(page)
    page.locator(".toolbar .badge.completed").wait_for()
    page.locator("[data-agent] .bar span", has_text="4 of 4").wait_for()
    page.locator("table.recoveries td", has_text="✓ verified").wait_for()
    assert status_of(served, aid)["status"] == "completed"
    assert market.duplicate_calls == 0
    _shot(page, "analysis-completed.png")

    page.goto(served.url + "/#/")
    page.locator(f'tr[data-analysis="{aid}"] .badge.completed').wait_for()
    _shot(page, "analyses.png")


def test_approve_a_review_and_the_analysis_continues(
    served: Served, page: Any, engines: Engines, uid: Callable[[str], str]
) -> None:
    body = {"definition": apps.REVIEWED, "input": {"ticker": "NVDA"}}
    made = served.change("/api/analyses", body)
    aid = made.json()["analysis_id"]
    scope = f"{engines.prefix}-{uid('web')}"
    with SyncPersistenceManager(engines.redis_url, prefix=scope) as pm:
        pm.save_review({"review_id": "rev_web", "task_id": "t9", "confidence": 0.4})
        wait_until(lambda: status_of(served, aid)["status"] == "paused", what="the review pause")
        page.goto(f"{served.url}/#/analysis/{aid}")  # a review's wait, with its decision
        toolbar = page.locator(".toolbar")
        toolbar.get_by_text("waiting for review").wait_for()
        assert toolbar.get_by_role("button", name="Approve publish").count() == 1
        assert toolbar.get_by_role("button", name="Resume").count() == 0
        page.goto(served.url + "/#/reviews")
        card = page.locator(".review", has_text=aid[:8])
        card.wait_for()
        assert "Note on NVDA" in card.inner_text()
        task_card = page.locator(f'.review[data-review="{scope}:rev_web"]')
        assert "task t9 · confidence 0.40" in task_card.inner_text()  # one queue: both kinds
        _shot(page, "reviews.png")
        task_card.get_by_role("button", name="Approve").click()
        _confirm(page, "fine")
        task_card.wait_for(state="detached")
        decided = pm.get_review("rev_web")
        assert decided is not None and (decided.decision, decided.decided_by) == ("approved", "web")
        card.get_by_role("button", name="Approve").click()
        _confirm(page, "looks right")
        wait_until(
            lambda: status_of(served, aid)["status"] == "completed", what="the analysis to end"
        )
        page.locator(".review", has_text=aid[:8]).wait_for(state="detached")
    page.goto(f"{served.url}/#/analysis/{aid}")
    page.locator(".toolbar .badge.completed").wait_for()
    result = status_of(served, aid)["agents"][0]["result"]
    assert result["published"] is True


def _count(stack: amber.Stack) -> int:
    return len(stack.analyses.list(None, 100_000))


def test_a_bad_token_is_refused_in_the_page(served: Served, page: Any) -> None:
    page.goto(served.url + "/")
    status = page.evaluate(
        """async () => (await fetch('/api/analyses', {method: 'POST',
            headers: {'X-Amber-Token': 'not-the-token', 'Content-Type': 'application/json'},
            body: JSON.stringify({definition: 'reviewed'})})).status"""
    )
    assert status == 401


def test_forged_requests_from_another_origin_are_refused(
    served: Served, page: Any, stack: amber.Stack
) -> None:
    evil = f"http://127.0.0.1:{served.port + 1 if served.port < 65535 else 1}/"
    page.route(
        evil,
        lambda route: route.fulfill(
            content_type="text/html", body="<html><body><h1>another origin</h1></body></html>"
        ),
    )
    page.goto(evil)
    before = _count(stack)
    outcome = page.evaluate(
        """async (target) => {
            const body = JSON.stringify({definition: 'reviewed'});
            const out = {};
            try {  // a JSON POST needs a preflight, which the server never grants
              const r = await fetch(target + '/api/analyses', {method: 'POST', body,
                headers: {'Content-Type': 'application/json', 'X-Amber-Token': 'guess'}});
              out.preflighted = r.status;
            } catch (e) { out.preflighted = 'blocked'; }
            try {  // a "simple" request goes without a preflight; the server refuses it
              await fetch(target + '/api/analyses', {method: 'POST', mode: 'no-cors', body,
                headers: {'Content-Type': 'text/plain'}, credentials: 'include'});
            } catch (e) { /* the browser may block it itself: refused either way */ }
            try {  // nor can another origin read the page to learn the token
              const r = await fetch(target + '/');
              out.read = (await r.text()).length;
            } catch (e) { out.read = 'blocked'; }
            const form = document.createElement('form');
            form.method = 'POST'; form.action = target + '/api/analyses';
            form.enctype = 'text/plain';
            const field = document.createElement('input');
            field.name = '{"definition":"reviewed","x":"'; field.value = '"}';
            form.append(field); document.body.append(form);
            return out;
        }""",
        served.url,
    )
    assert outcome == {"preflighted": "blocked", "read": "blocked"}
    with page.expect_navigation():
        page.evaluate("document.forms[0].submit()")
    assert "own pages" in page.content()  # the forged form post was refused (403)
    assert _count(stack) == before
