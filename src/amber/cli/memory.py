"""``amber memory show``, ``amber snapshot`` and ``amber verify``: one agent's L1."""

from __future__ import annotations

import typer
from rich.table import Table

from amber.cli.app import OPTIONS, app, console, friendly
from amber.errors import ConsistencyError

memory_app = typer.Typer(help="Inspect working memory.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")


def _preview(value: object, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


@memory_app.command("show")
@friendly
def memory_show(agent_id: str) -> None:
    """Show an agent's working memory: keys, types, sizes, TTLs and values."""
    from amber.codec import encode_value
    from amber.memory import read_memory

    with OPTIONS.stack() as stack:
        snap = read_memory(stack.redis, stack.keys, agent_id)
        mem = stack.memory(agent_id)
        ttls = {name: mem.ttl(name) for name in snap.memory}
        meta = stack.snapshotter.latest_meta(agent_id)
    table = Table("key", "type", "ttl s", "value")
    for name, entry in sorted(snap.memory.items()):
        table.add_row(
            name, entry.type, str(ttls[name]), _preview(encode_value(entry.type, entry.value))
        )
    console.print(table)
    console.print(f"{len(snap.memory)} keys · sequence {snap.seq} · sha256 {snap.hash[:16]}…")
    if meta:
        console.print(
            f"latest snapshot: {meta.timestamp} · {meta.key_count} keys · "
            f"sequence {meta.seq} · sha256 {meta.hash[:16]}…"
        )


@app.command()
@friendly
def snapshot(agent_id: str) -> None:
    """Snapshot an agent's working memory to the Redis secondary now."""
    with OPTIONS.stack() as stack:
        meta = stack.snapshotter.snapshot_on_checkpoint(agent_id)
    console.print(
        f"snapshot of {agent_id}: {meta.key_count} keys, sequence {meta.seq}, sha256 {meta.hash}"
    )


@app.command()
@friendly
def verify(agent_id: str) -> None:
    """Check that an agent's working memory matches its latest snapshot (exit 1 if not)."""
    from amber.memory import read_memory

    with OPTIONS.stack() as stack:
        meta = stack.snapshotter.latest_meta(agent_id)
        loaded = stack.restorer.load_secondary(agent_id)
        if meta is None or loaded is None:
            raise ConsistencyError("no snapshot to verify against", agent_id=agent_id)
        stack.verifier.check_snapshot(agent_id, loaded)  # the snapshot itself is sound
        snap = read_memory(stack.redis, stack.keys, agent_id)
    if snap.hash == meta.hash and len(snap.memory) == meta.key_count:
        console.print(f"ok: {len(snap.memory)} keys match the snapshot of {meta.timestamp}")
        return
    raise ConsistencyError(
        f"working memory differs from the snapshot of {meta.timestamp}"
        f" ({len(snap.memory)} keys now, {meta.key_count} then; sequence {snap.seq} vs {meta.seq})",
        agent_id=agent_id,
    )
