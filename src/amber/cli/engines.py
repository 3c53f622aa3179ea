"""``amber status`` and ``amber down``: the engines."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from amber.cli.app import OPTIONS, app, console, friendly


def _data_dir() -> Path:
    from amber.config import load_settings

    return load_settings(data_dir=OPTIONS.data_dir).data_dir


@app.command()
@friendly
def status() -> None:
    """Show which engines amber uses, where, their versions and the schema version."""
    from amber.config import load_settings
    from amber.engines.connect import redact
    from amber.engines.embedded import embedded_state

    cfg = load_settings(
        redis_url=OPTIONS.redis_url, database_url=OPTIONS.database_url, data_dir=OPTIONS.data_dir
    )
    table = Table("engine", "mode", "state")
    table.add_column("where", overflow="fold")
    states = {s.name: s for s in embedded_state(cfg.data_dir)}
    external = {"redis": cfg.redis_url, "postgresql": cfg.database_url}
    for name in ("redis", "postgresql"):
        url = external[name]
        if url:
            table.add_row(name, "external", "configured", redact(url))
        else:
            s = states[name]
            state = f"running (pid {s.pid})" if s.running else "stopped"
            table.add_row(name, "embedded", state, str(s.url or s.directory))
    console.print(table)
    everything_up = all(external[n] or states[n].running for n in external)
    if not everything_up:
        console.print("embedded engines start on first use (any amber command or amber.connect())")
        return
    with OPTIONS.stack() as stack:
        versions = stack.server_versions()
        console.print(
            f"redis {versions['redis']} · postgresql {versions['postgresql']} · "
            f"schema version {stack.schema_version()} · prefix {stack.keys.prefix!r}"
        )


@app.command()
@friendly
def down() -> None:
    """Stop the embedded servers of this data directory (external ones are left alone)."""
    from amber.engines.embedded import stop_embedded

    stopped = stop_embedded(_data_dir())
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
