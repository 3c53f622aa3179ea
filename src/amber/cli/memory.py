"""``amber memory show|snapshot|verify``: one agent's working memory (L1)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

import typer

from amber.cli import ids
from amber.cli.app import OPTIONS, app, console, friendly
from amber.cli.output import Col, JsonFlag, print_json, progress, table
from amber.errors import ConsistencyError, NotFound

memory_app = typer.Typer(help="Inspect, snapshot and verify working memory.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")

AgentArg = Annotated[
    str, typer.Argument(help="An agent id, or a unique prefix of an analysis's agent's id.")
]


def _preview(value: object, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


@memory_app.command("show")
@friendly
def memory_show(agent_id: AgentArg, as_json: JsonFlag = False) -> None:
    """Show an agent's working memory: keys, types, sizes, TTLs and values."""
    from amber.codec import encode_value
    from amber.memory import read_memory

    with OPTIONS.stack() as stack:
        agent_id = ids.agent_id(stack, agent_id)
        snap = read_memory(stack.redis, stack.keys, agent_id)
        mem = stack.memory(agent_id)
        ttls = {name: mem.ttl(name) for name in snap.memory}
        meta = stack.snapshotter.latest_meta(agent_id)
        if not snap.memory and meta is None and not stack.analyses.agent_ids_like(agent_id, 1):
            raise NotFound(
                "no working memory, snapshot or analysis has this agent id", agent_id=agent_id
            )
    keys = [
        {"key": name, "type": e.type, "ttl": ttls[name], "value": encode_value(e.type, e.value)}
        for name, e in sorted(snap.memory.items())
    ]
    if as_json:
        print_json(
            {
                "agent_id": agent_id,
                "keys": keys,
                "key_count": len(keys),
                "seq": snap.seq,
                "sha256": snap.hash,
                "latest_snapshot": asdict(meta) if meta else None,
            }
        )
        return
    table(
        [Col("key", "id"), Col("type"), Col("ttl s"), Col("value", "text")],
        [[k["key"], k["type"], str(k["ttl"]), _preview(k["value"])] for k in keys],
    )
    console.print(
        f"{len(snap.memory)} keys · sequence {snap.seq} · sha256 {snap.hash[:16]}…",
        highlight=False,
    )
    if meta:
        console.print(
            f"latest snapshot: {meta.timestamp} · {meta.key_count} keys · "
            f"sequence {meta.seq} · sha256 {meta.hash[:16]}…",
            highlight=False,
        )


@memory_app.command("snapshot")
@friendly
def snapshot(agent_id: AgentArg, as_json: JsonFlag = False) -> None:
    """Snapshot an agent's working memory to the Redis secondary now."""
    with OPTIONS.stack() as stack, progress(as_json) as bar:
        agent_id = ids.agent_id(stack, agent_id)
        size = int(stack.redis.hlen(stack.keys.l1_index(agent_id)))
        task = bar.add_task(f"reading {size} keys of {agent_id}", total=2)
        snap = stack.snapshotter.take(agent_id)
        bar.update(task, completed=1, description=f"writing the snapshot of {agent_id}")
        meta = stack.snapshotter.store(snap)
        bar.update(task, completed=2)
    if as_json:
        print_json(asdict(meta))
        return
    console.print(
        f"snapshot of {agent_id}: {meta.key_count} keys, sequence {meta.seq}, sha256 {meta.hash}",
        highlight=False,
    )


@memory_app.command("verify")
@friendly
def verify(agent_id: AgentArg, as_json: JsonFlag = False) -> None:
    """Check that an agent's working memory matches its latest snapshot (exit 1 if not)."""
    from amber.memory import read_memory

    with OPTIONS.stack() as stack:
        agent_id = ids.agent_id(stack, agent_id)
        meta = stack.snapshotter.latest_meta(agent_id)
        loaded = stack.restorer.load_secondary(agent_id)
        if meta is None or loaded is None:
            raise ConsistencyError("no snapshot to verify against", agent_id=agent_id)
        stack.verifier.check_snapshot(agent_id, loaded, decode=True)  # the snapshot is sound
        snap = read_memory(stack.redis, stack.keys, agent_id)
    if snap.hash == meta.hash and len(snap.memory) == meta.key_count:
        if as_json:
            doc: dict[str, Any] = {"agent_id": agent_id, "ok": True, "key_count": meta.key_count}
            print_json({**doc, "snapshot_timestamp": meta.timestamp, "seq": snap.seq})
            return
        console.print(
            f"ok: {len(snap.memory)} keys match the snapshot of {meta.timestamp}", highlight=False
        )
        return
    raise ConsistencyError(
        f"working memory differs from the snapshot of {meta.timestamp}"
        f" ({len(snap.memory)} keys now, {meta.key_count} then; sequence {snap.seq} vs {meta.seq})",
        agent_id=agent_id,
    )
