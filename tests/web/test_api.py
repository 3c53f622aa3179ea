"""The JSON API and /metrics of ``amber serve``, over real HTTP, on the suite's servers."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import amber
from amber.examples import app as examples_app
from amber.persistence import SyncPersistenceManager

from ..conftest import Engines, on_cluster
from . import apps
from .conftest import Served, status_of, wait_until


def _submit(served: Served, definition: str, **body: Any) -> str:
    response = served.change("/api/analyses", {"definition": definition, **body})
    assert response.status_code == 201, response.text
    return str(response.json()["analysis_id"])


def _status(served: Served, aid: str, status: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        a = status_of(served, aid)
        # a runner moves the status first, then records the pause: wait for both
        return a if a["status"] == status and (status != "paused" or a["pause"]) else None

    return wait_until(reached, what=f"analysis {aid} to be {status}")


def _metric(served: Served, name: str, **labels: str) -> float:
    text = served.client.get("/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = re.search(rf"^{name}(?:\{{{re.escape(want)}\}})? (\S+)$", text, re.M)
    return float(line.group(1)) if line else 0.0


def test_quota_pause_then_resume_completes_with_recovery_reports(
    served: Served, market: Any
) -> None:
    pauses_before = _metric(served, "amber_pauses_total", reason="quota_exhausted")
    aid = _submit(served, apps.QUOTA, ticker="AAPL")
    paused = _status(served, aid, "paused")
    assert paused["pause"]["reason"] == "quota_exhausted"
    (agent,) = paused["agents"]
    assert (agent["done"], agent["total"]) == (1, 4) and agent["progress"] == "1 of 4"
    assert [c["seq"] for c in agent["checkpoints"]] == sorted(
        c["seq"] for c in agent["checkpoints"]
    )
    listed = served.client.get("/api/analyses", params={"status": "paused"}).json()["items"]
    assert aid in {a["analysis_id"] for a in listed}

    market.set_quota("koyfin", None)
    resumed = served.change(f"/api/analyses/{aid}/resume")
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["resumed"] is True
    done = _status(served, aid, "completed")
    assert done["agents"][0]["steps"] == list(apps.QuotaAnalyst.subtasks)
    (pause,) = done["pauses"]
    assert pause["resumed_by"] == "web"
    (recovery,) = pause["recoveries"]
    assert recovery["path"] == "l1_existing" and recovery["verified"] is True
    assert served.client.get(f"/api/analyses/{aid}/recoveries").json() == done["pauses"]
    assert market.duplicate_calls == 0
    assert _metric(served, "amber_pauses_total", reason="quota_exhausted") == pauses_before + 1
    assert _metric(served, "amber_resumes_total", reason="quota_exhausted") >= 1


def test_a_review_waits_and_its_approval_continues_the_analysis(served: Served) -> None:
    aid = _submit(served, apps.REVIEWED, input={"ticker": "MSFT"})
    _status(served, aid, "paused")
    pending = served.client.get("/api/reviews", params={"analysis": aid}).json()
    (review,) = pending
    assert review["kind"] == "publish" and review["payload"] == {"title": "Note on MSFT"}
    approved = served.change(f"/api/reviews/{review['review_id']}/approve", {"comment": "ok"})
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    done = _status(served, aid, "completed")
    assert done["agents"][0]["result"] == {
        "draft": {"title": "Note on MSFT"},
        "published": True,
        "by": "web",
    }
    again = served.change(f"/api/reviews/{review['review_id']}/reject")
    assert again.status_code == 409 and "already approved" in again.json()["error"]


def test_a_task_review_of_the_sessions_module_is_in_the_one_queue(
    served: Served, engines: Engines, uid: Callable[[str], str]
) -> None:
    scope = f"{engines.prefix}-{uid('api')}"
    with SyncPersistenceManager(engines.redis_url, prefix=scope) as pm:
        pm.save_review({"review_id": "rev_1", "task_id": "t1", "confidence": 0.5, "kind": "x"})
        (listed,) = served.client.get("/api/reviews", params={"scope": scope}).json()
        assert (listed["ref"], listed["task_id"], listed["analysis_id"]) == (
            f"{scope}:rev_1",
            "t1",
            None,
        )
        everything = served.client.get("/api/reviews", params={"limit": 500}).json()
        assert f"{scope}:rev_1" in [r["ref"] for r in everything]
        approved = served.change(f"/api/reviews/{scope}:rev_1/approve", {"comment": "ok"})
        assert approved.status_code == 200 and approved.json()["status"] == "approved"
        again = served.change(f"/api/reviews/{scope}:rev_1/reject")
        assert again.status_code == 409 and "already approved" in again.json()["error"]
        decided = pm.get_review("rev_1")
        assert decided is not None and (decided.decision, decided.comment) == ("approved", "ok")
    assert served.client.get("/api/reviews", params={"scope": "a*"}).status_code == 400
    assert served.client.get("/api/sessions-reviews").status_code == 404


def test_pause_waits_for_the_runner_then_resume_finishes(served: Served) -> None:
    apps.GATE.clear()
    aid = _submit(served, apps.GATED)
    wait_until(lambda: status_of(served, aid)["owner"], what="a worker to hold the analysis")
    paused = served.change(f"/api/analyses/{aid}/pause", {"reason": "maintenance"})
    assert paused.status_code == 200 and paused.json()["pending"] is True
    apps.GATE.set()
    shown = wait_until(  # the runner freezes its agents at the step boundary
        lambda: (a := status_of(served, aid))["pauses"] and a["pauses"][-1]["frozen_at"] and a,
        what="the runner to freeze the analysis",
    )
    assert shown["pause"]["reason"] == "maintenance"
    assert shown["agents"][0]["steps"] == ["gate"]
    assert served.change(f"/api/analyses/{aid}/resume").status_code == 200
    done = _status(served, aid, "completed")
    assert done["agents"][0]["result"] == {"after": 1}
    assert served.change(f"/api/analyses/{aid}/pause").status_code == 409


def test_listing_pages_and_filters(served: Served, stack: amber.Stack) -> None:
    ids = [examples_app.submit(stack, "stock_analysis", ticker="MSFT") for _ in range(3)]
    first = served.client.get("/api/analyses", params={"status": "running", "limit": 2}).json()
    assert first["more"] is True and len(first["items"]) == 2
    assert [a["analysis_id"] for a in first["items"]] == ids[::-1][:2]
    assert all(a["queued"] and a["owner"] is None for a in first["items"])
    assert first["items"][0]["agents"][0]["progress"] == "0 of 4"
    second = served.client.get(
        "/api/analyses", params={"status": "running", "limit": 2, "offset": 2}
    ).json()
    assert ids[0] in [a["analysis_id"] for a in second["items"]]
    bad = served.client.get("/api/analyses", params={"status": "nope"})
    assert bad.status_code == 400 and "status" in bad.json()["error"]
    assert _metric(served, "amber_queue_depth") >= 3
    for aid in ids:  # not this app's: a queued analysis is paused where it stands
        assert served.change(f"/api/analyses/{aid}/pause", {"reason": "tidy"}).status_code == 200
        assert status_of(served, aid)["pause"]["reason"] == "tidy"


def test_errors_are_json_with_a_status(served: Served) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    assert served.client.get(f"/api/analyses/{missing}").status_code == 404
    assert served.client.get("/api/analyses/not-a-uuid").status_code == 400
    assert served.change(f"/api/analyses/{missing}/retry").status_code == 404
    unknown = served.change("/api/analyses", {"definition": "nothing"})
    assert unknown.status_code == 404 and "nothing" in unknown.json()["error"]
    resolve = served.change(f"/api/steps/{missing}/resolve", {"action": "rerun"})
    assert resolve.status_code in (404, 409)
    assert served.change(f"/api/steps/{missing}/resolve", {"action": "maybe"}).status_code == 422
    assert isinstance(served.client.get("/api/steps/in-doubt").json(), list)
    sessions = served.client.get("/api/sessions")
    assert sessions.status_code == (501 if on_cluster() else 200)


def test_openapi_schema_lists_the_api(served: Served) -> None:
    schema = served.client.get("/api/openapi.json").json()
    paths = set(schema["paths"])
    for path in (
        "/api/analyses",
        "/api/analyses/{analysis_id}",
        "/api/analyses/{analysis_id}/pause",
        "/api/analyses/{analysis_id}/resume",
        "/api/analyses/{analysis_id}/retry",
        "/api/steps/in-doubt",
        "/api/steps/{step_id}/resolve",
        "/api/reviews",
        "/api/reviews/{review_id}/approve",
        "/api/sessions",
    ):
        assert path in paths, path


def test_nul_characters_are_a_4xx_naming_the_field(served: Served) -> None:
    """PostgreSQL's text and jsonb cannot hold U+0000: said as the field, never a 500."""
    refused = served.change("/api/analyses", {"definition": apps.REVIEWED, "input": {"t": "a\x00"}})
    assert refused.status_code in (400, 422), refused.text
    assert "input" in refused.json()["error"] and "NUL" in refused.json()["error"]
    keyed = served.change("/api/analyses", {"definition": apps.REVIEWED, "input": {"a\x00": 1}})
    assert keyed.status_code in (400, 422) and "input" in keyed.json()["error"]
    aid = _submit(served, apps.REVIEWED, input={"ticker": "NUL"})
    _status(served, aid, "paused")
    (review,) = served.client.get("/api/reviews", params={"analysis": aid}).json()
    bad = served.change(f"/api/reviews/{review['review_id']}/approve", {"data": {"x": "\x00"}})
    assert bad.status_code in (400, 422), bad.text
    assert "data" in bad.json()["error"]
    still = served.client.get("/api/reviews", params={"analysis": aid}).json()
    assert [r["status"] for r in still] == ["pending"]  # nothing decided
    assert served.change(f"/api/reviews/{review['review_id']}/approve").status_code == 200
    _status(served, aid, "completed")
