"""``amber wal inspect|verify|compact``."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from amber.cli import app
from amber.wal import StateStore
from amber.wal.files import list_checkpoints
from amber.wal.retention import checkpoint_dir, wal_dir
from amber.wal.segments import list_segments

runner = CliRunner()


def make_store(directory: Path) -> None:
    clock = [1_000_000.0]
    store = StateStore(directory, segment_entries=4, clock=lambda: clock[0])
    for i in range(20):
        store.log("memory_add", {"content": i})
        if i % 5 == 4:
            store.checkpoint()
            clock[0] += 3600
    store.close()


def test_inspect_shows_segments_and_checkpoint_headers(tmp_path: Path) -> None:
    make_store(tmp_path)
    result = runner.invoke(app, ["wal", "inspect", str(tmp_path)])
    assert result.exit_code == 0, result.output
    first_seg = list_segments(wal_dir(tmp_path))[0][1].name
    assert first_seg[:12] in result.output
    assert "wal_seq      20" in result.output and "zstd_level" in result.output


def test_verify_passes_then_names_file_and_offset(tmp_path: Path) -> None:
    make_store(tmp_path)
    ok = runner.invoke(app, ["wal", "verify", str(tmp_path)])
    assert ok.exit_code == 0 and "every checksum matches" in ok.output
    _, segment = list_segments(wal_dir(tmp_path))[-2]
    raw = bytearray(segment.read_bytes())
    raw[-2] ^= 1
    segment.write_bytes(bytes(raw))
    bad = runner.invoke(app, ["wal", "verify", str(tmp_path)])
    assert bad.exit_code == 1
    assert segment.name in bad.output and "offset=" in bad.output


def test_verify_a_missing_directory_is_a_clean_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["wal", "verify", str(tmp_path / "nope")])
    assert result.exit_code == 1 and "not a directory" in result.output
    assert "Traceback" not in result.output


def test_compact_removes_what_retention_allows(tmp_path: Path) -> None:
    make_store(tmp_path)
    before = list_checkpoints(checkpoint_dir(tmp_path))
    result = runner.invoke(app, ["wal", "compact", str(tmp_path), "--retention-hours", "0"])
    assert result.exit_code == 0, result.output
    after = list_checkpoints(checkpoint_dir(tmp_path))
    assert after == before[-2:]
    assert "removed" in result.output
    with StateStore(tmp_path) as store:
        assert store.state["memory"] == list(range(20))
    again = runner.invoke(app, ["wal", "compact", str(tmp_path), "--retention-hours", "0"])
    assert "nothing to remove" in again.output


def test_verify_and_inspect_report_a_damaged_checkpoint(tmp_path: Path) -> None:
    make_store(tmp_path)
    newest = list_checkpoints(checkpoint_dir(tmp_path))[-1]
    raw = bytearray(newest.read_bytes())
    raw[3] ^= 1  # inside the magic: the header CRC fails
    newest.write_bytes(bytes(raw))
    bad = runner.invoke(app, ["wal", "verify", str(tmp_path)])
    assert bad.exit_code == 1 and newest.name in bad.output and "offset=0" in bad.output
    shown = runner.invoke(app, ["wal", "inspect", str(tmp_path)])
    assert shown.exit_code == 0 and "unreadable header" in shown.output
