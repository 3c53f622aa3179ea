"""``amber serve``: the JSON API, the dashboard and ``/metrics`` over HTTP."""

from __future__ import annotations

from typing import Annotated

import typer

from amber.cli.app import OPTIONS, app, console, friendly
from amber.cli.runtime import AppOption, load

DEFAULT_PORT = 8765


@app.command()
@friendly
def serve(
    app_target: AppOption = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; beyond loopback it needs AMBER_SERVE_TOKEN.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = DEFAULT_PORT,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(help="Another Host name the server answers to (repeat for more)."),
    ] = None,
    worker: Annotated[
        int,
        typer.Option(
            "--worker",
            min=0,
            max=10_000,
            help="Also run a worker of the app here, this many analyses at once (0: none).",
        ),
    ] = 0,
) -> None:
    """Serve the dashboard, the JSON API (/api/docs) and Prometheus metrics (/metrics).

    A resume or a review decision queues the analysis for a worker of the app: run
    ``amber worker`` beside it, or give ``--worker N``.
    """
    try:
        import uvicorn

        from amber.web.server import build
    except ImportError as exc:  # the web extra is not installed
        raise typer.BadParameter(
            f"amber serve needs the web extra: pip install 'amber[web]' ({exc})"
        ) from None
    application = load(app_target)
    with OPTIONS.stack() as stack:
        web, guard = build(stack, application, host, port, allow_host or (), worker)
        shown = f"[{host}]" if ":" in host else host
        console.print(
            f"amber serve: app {application.name} on http://{shown}:{port}/"
            + ("" if guard.configured else " (loopback only; a token made for this process)"),
            highlight=False,
        )
        uvicorn.run(web, host=host, port=port, log_level="warning", access_log=False)
