"""``amber wal inspect|verify|compact DIR``: look at, check and trim a WAL store directory.

DIR is a ``StateStore`` directory (with ``wal/`` and ``checkpoints/``) or a bare
directory of WAL segments.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from amber import defaults
from amber.cli.app import app, console, friendly, say_error
from amber.cli.output import Col, JsonFlag, print_json, progress, table
from amber.errors import InvalidValue, WalError

wal_app = typer.Typer(help="Inspect, verify and compact a write-ahead log directory.")
app.add_typer(wal_app, name="wal")

DirArg = Annotated[Path, typer.Argument(help="Store directory (or a directory of segments).")]


def _dirs(directory: Path) -> tuple[Path, Path]:
    from amber.wal.retention import checkpoint_dir, wal_dir
    from amber.wal.segments import list_segments

    if not directory.is_dir():
        raise WalError("not a directory", directory=str(directory))
    wals = wal_dir(directory)
    wals = wals if wals.is_dir() else directory
    ckpts = checkpoint_dir(directory)
    if not list_segments(wals) and not ckpts.is_dir():
        raise WalError("no WAL segments or checkpoint files here", directory=str(directory))
    return wals, ckpts


@wal_app.command()
@friendly
def inspect(directory: DirArg, as_json: JsonFlag = False) -> None:
    """List segments (entries, sequence range) and checkpoint files with their header fields."""
    from amber.wal.files import list_checkpoints, read_header
    from amber.wal.format import scan_frames
    from amber.wal.segments import list_segments, read_file

    wals, ckpts = _dirs(directory)
    segments: list[dict[str, Any]] = []
    for first, path in list_segments(wals):
        data = read_file(path)
        scan = scan_frames(data, first)
        segments.append(
            {
                "segment": path.name,
                "bytes": len(data),
                "entries": scan.count,
                "first_seq": first,
                "last_seq": first + scan.count - 1,
                "damaged_at": None if scan.problem is None else scan.end,
                "problem": scan.problem,
            }
        )
    checkpoints: list[dict[str, Any]] = []
    for path in list_checkpoints(ckpts) if ckpts.is_dir() else []:
        try:
            h = read_header(path)
        except WalError as exc:
            checkpoints.append({"checkpoint": path.name, "error": exc.message})
            continue
        taken = datetime.fromtimestamp(h.timestamp_ns / 1e9, UTC).isoformat(timespec="seconds")
        checkpoints.append(
            {
                "checkpoint": path.name,
                "wal_seq": h.wal_seq,
                "taken": taken,
                "id": h.checkpoint_id,
                "version": h.version,
                "compressed": h.compressed_size,
                "uncompressed": h.uncompressed_size,
                "zstd_level": h.level,
                "sha256": h.sha256.hex(),
            }
        )
    if as_json:
        print_json({"segments": segments, "checkpoints": checkpoints})
        return
    table(
        [
            Col("segment", "id"),
            Col("bytes"),
            Col("entries"),
            Col("first seq"),
            Col("last seq"),
            Col("state", "text"),
        ],
        [
            [
                s["segment"],
                str(s["bytes"]),
                str(s["entries"]),
                str(s["first_seq"]),
                str(s["last_seq"]),
                "ok" if s["problem"] is None else f"damaged at {s['damaged_at']}: {s['problem']}",
            ]
            for s in segments
        ],
    )
    for c in checkpoints:
        console.print(f"checkpoint {c.pop('checkpoint')}", soft_wrap=True, highlight=False)
        if "error" in c:
            say_error("  unreadable header:", c["error"], console)
            continue
        for name, value in c.items():
            console.print(f"  {name:<13}{value}", soft_wrap=True, highlight=False)


@wal_app.command()
@friendly
def verify(directory: DirArg, as_json: JsonFlag = False) -> None:
    """Check every entry and checkpoint checksum; exit 1 naming file and offset on damage."""
    from amber.wal.files import list_checkpoints, read_checkpoint
    from amber.wal.segments import check_segment, list_segments, read_file

    wals, ckpts = _dirs(directory)
    problems: list[str] = []
    entries = 0
    for first, path in list_segments(wals):
        try:
            entries += check_segment(path, first, read_file(path), last=False).count
        except WalError as exc:
            problems.append(str(exc))
    checked = list_checkpoints(ckpts) if ckpts.is_dir() else []
    for path in checked:
        try:
            read_checkpoint(path)
        except WalError as exc:
            problems.append(str(exc))
    if as_json:
        print_json(
            {
                "ok": not problems,
                "entries": entries,
                "checkpoints": len(checked),
                "problems": problems,
            }
        )
    else:
        for problem in problems:
            say_error("corrupt:", problem)
    if problems:
        raise typer.Exit(1)
    if not as_json:
        console.print(f"ok: {entries} entries, {len(checked)} checkpoints, every checksum matches")


@wal_app.command(name="compact")
@friendly
def compact_cmd(
    directory: DirArg,
    retention_hours: Annotated[
        float, typer.Option(min=0, help="Delete checkpoints older than this.")
    ] = defaults.CHECKPOINT_RETENTION / 3600,
    keep: Annotated[
        int, typer.Option(min=1, help="Always keep this many newest checkpoints.")
    ] = defaults.CHECKPOINT_KEEP,
    as_json: JsonFlag = False,
) -> None:
    """Remove what retention allows: old checkpoints and the log before the oldest kept one."""
    from amber.wal.retention import compact

    if not math.isfinite(retention_hours):
        raise InvalidValue("--retention-hours must be a finite number", field="retention_hours")
    _dirs(directory)
    with progress(as_json) as bar:
        task = bar.add_task("removing files", total=None)
        done = compact(
            directory,
            retention=retention_hours * 3600,
            keep=keep,
            removed=lambda _: bar.advance(task),
        )
    if as_json:
        print_json(
            {
                "checkpoints": [str(p) for p in done.checkpoints],
                "segments": [str(p) for p in done.segments],
                "temp_files": [str(p) for p in done.temp_files],
            }
        )
        return
    for path in done.removed:
        console.print(f"removed {path}", soft_wrap=True, highlight=False)
    if not done.removed:
        console.print("nothing to remove")
