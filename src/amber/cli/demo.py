"""``amber demo``: the main job, end to end (see ``amber.demo``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table

from amber.cli.app import OPTIONS, app, console, friendly
from amber.cli.output import print_json, progress

if TYPE_CHECKING:
    from amber.stack import Stack


@contextlib.contextmanager
def _demo_stack(stop: bool) -> Iterator[tuple[Stack, Any]]:
    from amber.config import load_settings
    from amber.engines.embedded import EmbeddedRedis, stop_embedded
    from amber.stack import connect

    cfg = load_settings(
        redis_url=OPTIONS.redis_url,
        database_url=OPTIONS.database_url,
        data_dir=OPTIONS.data_dir,
        prefix=OPTIONS.prefix,
    )
    embedded_redis = not cfg.redis_url
    data_dir = cfg.data_dir  # the data directory's own servers: amber serve shows the run
    stack = connect(
        cfg.redis_url,
        cfg.database_url,
        data_dir,
        f"{cfg.prefix}-demo" if not embedded_redis else cfg.prefix,
        agent_concurrency=1,  # the analysts one after another: the same story every run
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
        if stop and (embedded_redis or not cfg.database_url):
            stop_embedded(data_dir)


@app.command()
@friendly
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON only.")] = False,
    stop: Annotated[
        bool, typer.Option("--stop", help="Stop the embedded servers at the end (amber down).")
    ] = False,
) -> None:
    """Pause an AAPL analysis twice for days (L1 expiry, then Redis lost) and resume it.

    It runs on the data directory's servers and leaves them running: ``amber serve``
    then shows the analysis, its pauses and its recoveries."""
    from amber.demo import run_demo

    with _demo_stack(stop) as (stack, lose_redis), progress(as_json) as bar:
        stage = bar.add_task("the demo", total=None)

        def say(line: str) -> None:
            if not as_json:
                console.print(line, highlight=False)
            bar.update(stage, description=line.split(" - ")[0][:40], advance=1)

        report = run_demo(stack, lose_redis, say)
    if as_json:
        print_json(report)
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
