"""Checkpoint files: round trip, atomic write, every kind of damage detected."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from amber.errors import WalCorruption, WalError
from amber.wal import read_checkpoint, read_header, write_checkpoint
from amber.wal.files import HEADER_SIZE, expired_checkpoints, list_checkpoints, list_temp_files

STATE = {"memory": ["a" * 100] * 50, "tools": {"t": {"x": b"\x00\xff"}}, "n": 1.5}


def test_round_trip(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path, STATE, wal_seq=42, level=9, clock=lambda: 1000.0)
    header, state = read_checkpoint(written.path)
    assert state == STATE
    assert header == read_header(written.path) == written.header
    assert header.wal_seq == 42 and header.level == 9 and header.timestamp_ns == 1000 * 10**9
    body = written.path.read_bytes()[HEADER_SIZE:]
    assert header.compressed_size == len(body) < header.uncompressed_size
    assert header.sha256 == hashlib.sha256(body).digest()
    assert list_checkpoints(tmp_path) == [written.path] and not list_temp_files(tmp_path)


def test_names_sort_by_wal_sequence(tmp_path: Path) -> None:
    paths = [write_checkpoint(tmp_path, {}, wal_seq=s).path for s in (10, 9, 100)]
    assert list_checkpoints(tmp_path) == [paths[1], paths[0], paths[2]]


def test_unserializable_state_is_refused_before_any_file(tmp_path: Path) -> None:
    with pytest.raises(WalError, match="msgpack"):
        write_checkpoint(tmp_path, {"x": object()}, wal_seq=1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("what", "damage"),
    [
        ("header", lambda raw: raw[:5] + b"X" + raw[6:]),
        ("short header", lambda raw: raw[:100]),
        ("truncated body", lambda raw: raw[:-1]),
        ("appended bytes", lambda raw: raw + b"x"),
        ("flipped body bit", lambda raw: raw[:-3] + bytes([raw[-3] ^ 4]) + raw[-2:]),
        ("empty file", lambda raw: b""),
    ],
)
def test_damage_is_detected(tmp_path: Path, what: str, damage: object) -> None:
    path = write_checkpoint(tmp_path, STATE, wal_seq=1).path
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(WalCorruption) as info:
        read_checkpoint(path)
    assert info.value.context["file"] == str(path)


def test_retention_plan_keeps_the_newest() -> None:
    paths = [Path(str(i)) for i in range(5)]
    times = [0.0, 10.0, 20.0, 30.0, 40.0]
    assert expired_checkpoints(paths, times, now=100, retention=75, keep=2) == paths[:3]
    assert expired_checkpoints(paths, times, now=1000, retention=75, keep=2) == paths[:3]
    assert expired_checkpoints(paths, times, now=1000, retention=75, keep=9) == []
    assert expired_checkpoints(paths, times, now=50, retention=75, keep=1) == []
