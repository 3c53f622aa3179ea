"""The ``amber`` Typer app and the options every command shares, declared once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

from amber.engines.stack import Stack, connect
from amber.errors import AmberError

app = typer.Typer(
    name="amber",
    help="Keep the state of long-running AI agents safe.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


@dataclass
class Options:
    """The shared options, as given on the command line or in AMBER_* variables."""

    redis_url: str | None = None
    database_url: str | None = None
    data_dir: Path | None = None
    prefix: str | None = None

    @contextmanager
    def stack(self) -> Iterator[Stack]:
        """Open amber with these options."""
        with connect(self.redis_url, self.database_url, self.data_dir, self.prefix) as stack:
            yield stack


OPTIONS = Options()


@app.callback()
def _shared(
    redis_url: Annotated[
        str | None, typer.Option(envvar="AMBER_REDIS_URL", help="Redis URL (default: embedded).")
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(envvar="AMBER_DATABASE_URL", help="PostgreSQL URL (default: embedded)."),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(envvar="AMBER_DATA_DIR", help="Data directory (./.amber).")
    ] = None,
    prefix: Annotated[
        str | None, typer.Option(envvar="AMBER_PREFIX", help="Redis key prefix (amber).")
    ] = None,
) -> None:
    OPTIONS.redis_url = redis_url
    OPTIONS.database_url = database_url
    OPTIONS.data_dir = data_dir
    OPTIONS.prefix = prefix


P = ParamSpec("P")
R = TypeVar("R")


def friendly(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn an ``AmberError`` into a one-line message and exit code 1."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except AmberError as exc:
            err_console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper
