"""``amber demo``: the main job, end to end (see ``amber.demo``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich import box
from rich.table import Table

from amber.cli.app import OPTIONS, app, console, friendly

if TYPE_CHECKING:
    from amber.engines.stack import Stack


@contextlib.contextmanager
def _demo_stack(keep: bool) -> Iterator[tuple[Stack, Any]]:
    from amber.config import load_settings
    from amber.engines.embedded import EmbeddedRedis, stop_embedded
    from amber.engines.stack import connect

    cfg = load_settings(
        redis_url=OPTIONS.redis_url,
        database_url=OPTIONS.database_url,
        data_dir=OPTIONS.data_dir,
        prefix=OPTIONS.prefix,
    )
    embedded_redis = not cfg.redis_url
    data_dir = cfg.data_dir / "demo"
    stack = connect(
        cfg.redis_url,
        cfg.database_url,
        data_dir,
        f"{cfg.prefix}-demo" if not embedded_redis else cfg.prefix,
    )

    def lose_redis() -> str:
        if embedded_redis:  # the demo's own embedded server: really restart it, empty
            server = EmbeddedRedis(data_dir.resolve())
            before = server.pid()
            server.stop()
            server.ensure()
            return f"Redis restarted (pid {before} → {server.pid()}), every key lost"
        pattern = stack.keys.all_keys_pattern()
        keys = list(stack.redis.scan_iter(match=pattern, count=1000))
        for i in range(0, len(keys), 500):
            stack.redis.delete(*keys[i : i + 500])
        return (
            f"every key under prefix {stack.keys.prefix!r} deleted ({len(keys)} keys; "
            "an external Redis is never restarted by the demo)"
        )

    try:
        yield stack, lose_redis
    finally:
        stack.close()
        if not keep and (embedded_redis or not cfg.database_url):
            stop_embedded(data_dir)


@app.command()
@friendly
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON only.")] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Leave the demo's engines running.")] = False,
) -> None:
    """Pause an AAPL analysis twice for days (L1 expiry, then Redis lost) and resume it."""
    from amber.demo import run_demo

    say = (lambda _: None) if as_json else (lambda line: console.print(line, highlight=False))
    with _demo_stack(keep) as (stack, lose_redis):
        report = run_demo(stack, lose_redis, say)
    if as_json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    for resume in report["resumes"]:
        table = Table(title=f"resume {resume['scenario']}", box=box.SIMPLE)
        for col in ("agent", "recovered from", "ms", "keys", "ok", "subtasks"):
            table.add_column(col, no_wrap=True)
        for agent_type, a in resume["agents"].items():
            done = (a["progress"] or "-").removesuffix(" subtasks")
            table.add_row(
                agent_type,
                a["path"],
                f"{a['ms']:.1f}",
                str(a["keys"]),
                "✓" if a["verified"] else "✗",
                done,
            )
        console.print(table)
    console.print(
        f"analysis {report['status']} in {report['seconds']:.1f} s · market-data calls "
        f"{report['market_calls']} (restart-from-scratch: {report['calls_from_scratch']}) · "
        f"duplicate calls [bold]{report['duplicate_calls']}[/bold] · subtasks re-executed "
        f"[bold]{report['subtasks_reexecuted']}[/bold]",
        markup=True,
    )
