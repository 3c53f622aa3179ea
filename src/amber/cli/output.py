"""How commands print: tables that keep ids whole, ``--json``, and progress bars.

A table's id columns never wrap or shrink; its free-text columns wrap (nothing is cut).
When the terminal is too narrow for the ids and a little of everything else, each row
is printed as a record of ``name  value`` lines instead, its long values wrapped.
``--json`` prints with orjson, keys sorted. Progress bars go to stderr, only on a
terminal and never with ``--json``.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import orjson
import typer
from rich.cells import cell_len
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from amber import defaults
from amber.cli.app import console, err_console

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (sorted keys) instead of text.")]
AnalysisFilter = Annotated[
    str | None, typer.Option(help="Only this analysis (id or unique prefix).")
]

NARROWEST_TEXT = 10
"""Fewest characters a wrapping column is given before a table turns into records."""


Limit = Annotated[
    int, typer.Option(min=0, max=defaults.BIGINT_MAX, help="Most rows to show (0: all).")
]
"""Every listing's ``--limit``: one convention, 0 meaning all."""


def limit_rows(limit: int) -> int:
    """A ``--limit`` as the number of rows to ask for (0: all)."""
    return limit or defaults.BIGINT_MAX


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 run``, ``2 runs``: a count with its noun in the number it takes."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def print_json(doc: object) -> None:
    """Print ``doc`` as indented JSON, keys sorted; datetimes as RFC 3339."""
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    sys.stdout.write(orjson.dumps(doc, default=str, option=options).decode() + "\n")
    sys.stdout.flush()


@dataclass(frozen=True)
class Col:
    """A column: ``id`` (never wrapped or cut), ``short`` (a few words) or ``text``."""

    name: str
    kind: Literal["id", "short", "text"] = "short"


def shown(text: str) -> str:
    """``text`` as a terminal can show it and a table measure it: control, format and
    surrogate characters (a C1 control a terminal would act on, a bidi override) as
    backslash escapes; line breaks kept."""
    if text.isprintable():
        return text
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Cs")
        else ch
        for ch in text
    )


def table(columns: Sequence[Col], rows: Sequence[Sequence[str]], title: str | None = None) -> None:
    """Print rows as a table that fits the terminal with every id whole, or as records."""
    rows = [[shown(cell) for cell in r] for r in rows]
    widths = [
        max([len(c.name), *(max(map(cell_len, r[i].splitlines() or [""])) for r in rows)])
        for i, c in enumerate(columns)
    ]
    least = len(columns) + 1  # borders
    for c, w in zip(columns, widths, strict=True):
        least += 2 + (w if c.kind == "id" else min(w, max(len(c.name), NARROWEST_TEXT)))
    if rows and least > console.width:
        _records(columns, rows, title)
        return
    t = Table(title=title)
    for c, w in zip(columns, widths, strict=True):
        if c.kind == "id":
            t.add_column(c.name, no_wrap=True, min_width=w, overflow="fold")
        else:
            t.add_column(c.name, overflow="fold", ratio=2 if c.kind == "text" else None)
    for r in rows:
        t.add_row(*r)
    console.print(t)


def _records(columns: Sequence[Col], rows: Sequence[Sequence[str]], title: str | None) -> None:
    if title:
        console.print(title, highlight=False)
    for n, r in enumerate(rows, 1):
        console.print(Text(f"-- {n} of {len(rows)} --", style="dim"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for c, value in zip(columns, r, strict=True):
            grid.add_row(c.name, value)
        console.print(grid)


def progress(quiet: bool = False) -> Progress:
    """A progress display on stderr; silent when ``quiet`` or when stderr is no terminal."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=quiet or not err_console.is_terminal,
    )
