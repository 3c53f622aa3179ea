"""The ``amber`` Typer app and the options every command shares, declared once."""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TextIO, TypeVar, cast

import typer
from rich.console import Console
from rich.text import Text

from amber.errors import AmberError

if TYPE_CHECKING:
    from amber.stack import Stack


def _help_in_words() -> None:
    """Help that says what a value is in words, not in types: typer prints each option's
    Python type (``<str>``, ``<bool>`` even for flags and ``--help``), a number's range
    (``[1<=x<=9223372036854775807]``) and a required argument as ``{name}``. Every
    amber option's help says what it takes; arguments are written ``REVIEW_ID``."""
    from typer import core

    def no_type(self: Any, ctx: Any) -> str:
        return ""

    def no_range(self: Any) -> str | None:
        return None

    def usage_name(self: Any) -> str:
        name = str(self.display_name_raw).upper()
        return name if self.required else f"[{name}]"

    for cls in (core.TyperOption, core.TyperArgument):
        cls.display_type_rich = no_type  # type: ignore[method-assign]
        cls._get_number_range_help_str = no_range  # type: ignore[method-assign]
    core.TyperArgument._usage_display_name = usage_name  # type: ignore[method-assign]


_help_in_words()

app = typer.Typer(
    name="amber",
    help="Keep the state of long-running AI agents safe.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class SafeStream:
    """``sys.stdout`` or ``sys.stderr`` as it is now, writing what its encoding cannot
    hold (a lone surrogate from a non-UTF-8 argument, say) as backslash escapes."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def stream(self) -> TextIO:
        """The stream written to."""
        stream: TextIO = getattr(sys, self._name)
        return stream

    def write(self, text: str) -> int:
        """Write ``text``, escaping what the stream's encoding cannot hold."""
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        return self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def flush(self) -> None:
        """Flush the stream."""
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


# Output shows data (ids, keys, reasons) as it is: no markup, no :emoji: codes in it.
console = Console(file=cast(TextIO, SafeStream("stdout")), markup=False, emoji=False)
UNBOUNDED = 100_000
"""The width of output that goes to a file or a pipe: lines are never wrapped there."""
err_console = Console(file=cast(TextIO, SafeStream("stderr")), markup=False, emoji=False)


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
        from amber.stack import connect

        def announce(what: str) -> None:
            err_console.print(f"amber: {what}", highlight=False)

        with connect(
            self.redis_url, self.database_url, self.data_dir, self.prefix, announce=announce
        ) as stack:
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
        Path | None,
        typer.Option(
            envvar="AMBER_DATA_DIR",
            help="Data directory (the nearest .amber here or above, else ./.amber).",
        ),
    ] = None,
    prefix: Annotated[
        str | None, typer.Option(envvar="AMBER_PREFIX", help="Redis key prefix (amber).")
    ] = None,
) -> None:
    OPTIONS.redis_url = redis_url
    OPTIONS.database_url = database_url
    OPTIONS.data_dir = data_dir
    OPTIONS.prefix = prefix
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:  # as the environment says now
        console.width = err_console.width = int(columns)
    elif not console.is_terminal:  # piped: full width, nothing wrapped for a reader
        console.width = UNBOUNDED


P = ParamSpec("P")
R = TypeVar("R")


def say_error(label: str, message: object, console: Console = err_console) -> None:
    """Print ``label: message`` on one line, the label in red, a very long one shortened."""
    line = re.sub(r"\s*\n\s*", " ", str(message)).strip()
    if len(line) > 1000:
        line = f"{line[:600]} … {line[-300:]}"
    console.print(Text.assemble((label, "red"), " ", line), highlight=False, soft_wrap=True)


def friendly(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn an ``AmberError`` or an ``OSError`` (a file or socket the system refused)
    into a one-line ``error: ...`` and exit code 1."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (AmberError, OSError) as exc:
            say_error("error:", exc)
            raise typer.Exit(1) from None

    wrapper.__doc__ = reflowed(fn.__doc__)
    return wrapper


def reflowed(doc: str | None) -> str | None:
    """A docstring as ``--help`` shows it: each paragraph on one line, for the terminal
    to wrap (the source's line breaks would otherwise show mid-sentence), and without
    the reST quotes around code."""
    if doc is None:
        return None
    paragraphs = inspect.cleandoc(doc.replace("``", "")).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)
