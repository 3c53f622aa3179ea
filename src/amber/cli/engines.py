"""``amber status`` and ``amber down``: the engines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from amber.cli.app import OPTIONS, app, console, friendly
from amber.cli.output import JsonFlag, print_json
from amber.schema.sql import STATUSES

if TYPE_CHECKING:
    from amber.stack import Stack


def _data_dir() -> Path:
    from amber.config import load_settings

    return load_settings(data_dir=OPTIONS.data_dir).data_dir


RECENT_HOURS = 24
"""How far back ``amber status`` looks for failed analyses."""


@app.command()
@friendly
def status(as_json: JsonFlag = False) -> None:
    """Engines, versions and schema; then analyses by status, queued work, runs in flight,
    pending reviews, in-doubt steps and the failures of the last day."""
    from amber.config import load_settings
    from amber.engines.connect import redact
    from amber.engines.embedded import embedded_state

    cfg = load_settings(
        redis_url=OPTIONS.redis_url, database_url=OPTIONS.database_url, data_dir=OPTIONS.data_dir
    )
    states = {s.name: s for s in embedded_state(cfg.data_dir)}
    external = {"redis": cfg.redis_url, "postgresql": cfg.database_url}
    engines: list[dict[str, Any]] = []
    for name in ("redis", "postgresql"):
        url = external[name]
        if url:
            engines.append(
                {"engine": name, "mode": "external", "state": "configured", "where": redact(url)}
            )
        else:
            s = states[name]
            engines.append(
                {
                    "engine": name,
                    "mode": "embedded",
                    "state": f"running (pid {s.pid})" if s.running else "stopped",
                    "where": str(s.url or s.directory),
                }
            )
    doc: dict[str, Any] = {"engines": engines, "connected": False}
    if all(external[n] or states[n].running for n in external):
        with OPTIONS.stack() as stack:
            doc.update(_overview(stack), connected=True)
    if as_json:
        print_json(doc)
        return
    t = Table("engine", "mode", "state")
    t.add_column("where", overflow="fold")
    for e in engines:
        t.add_row(e["engine"], e["mode"], e["state"], e["where"])
    console.print(t)
    if not doc["connected"]:
        console.print("embedded engines start on first use (any amber command or amber.connect())")
        return
    v = doc["versions"]
    console.print(
        f"redis {v['redis']} · postgresql {v['postgresql']} (primary"
        f" {doc['postgresql_primary']}) · schema version {doc['schema_version']}"
        f" · prefix {doc['prefix']!r}",
        highlight=False,
    )
    by_status = ", ".join(f"{n} {s}" for s, n in doc["analyses"].items()) or "none"
    console.print(f"analyses: {by_status}", highlight=False)
    console.print(
        f"queued (running, no live run) {doc['queued']} · runs in flight {doc['in_flight']} · "
        f"pending reviews {doc['pending_reviews']} · steps in doubt {doc['in_doubt_steps']}",
        highlight=False,
    )
    if doc["unserved_agents"]:
        from amber.runtime.status import no_worker_registers

        console.print(
            f"queued analyses waiting: {no_worker_registers(doc['unserved_agents'])}",
            highlight=False,
        )
    failures = doc["recent_failures"]
    console.print(f"failed in the last {RECENT_HOURS} h: {len(failures)}", highlight=False)
    for f in failures:
        console.print(
            f"  {f['analysis_id']} {f['ticker']} {f['definition'] or '-'} "
            f"at {f['updated_at']:%Y-%m-%d %H:%M:%S}",
            soft_wrap=True,
            highlight=False,
        )


def _overview(stack: Stack) -> dict[str, Any]:
    """Versions, the schema, and what the analyses are doing."""
    counts = stack.analyses.status_counts()
    since = datetime.now(UTC) - timedelta(hours=RECENT_HOURS)
    return {
        "versions": stack.server_versions(),
        "postgresql_primary": stack.pg_primary(),
        "schema_version": stack.schema_version(),
        "prefix": stack.keys.prefix,
        "analyses": {s: counts.get(s, 0) for s in STATUSES},
        "queued": stack.analyses.queued(),
        "unserved_agents": stack.analyses.unserved_anywhere(),
        "in_flight": stack.analyses.in_flight(),
        "pending_reviews": stack.reviews.count("pending"),
        "in_doubt_steps": stack.intents.count_in_doubt(),
        "recent_failures": [
            {
                "analysis_id": r.analysis_id,
                "ticker": r.stock_ticker,
                "definition": r.definition,
                "updated_at": r.updated_at,
            }
            for r in stack.analyses.recent_failures(since)
        ],
    }


@app.command()
@friendly
def down() -> None:
    """Stop the embedded servers of this data directory (external ones are left alone)."""
    from amber.engines.embedded import stop_embedded

    stopped = stop_embedded(_data_dir())
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
