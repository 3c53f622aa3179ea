"""Bit flips and truncations anywhere in segments and checkpoint files are all detected."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from amber.errors import WalCorruption
from amber.wal import StateStore, WriteAheadLog, read_checkpoint
from amber.wal.files import list_checkpoints
from amber.wal.format import FRAME
from amber.wal.retention import checkpoint_dir
from amber.wal.segments import list_segments

pytestmark = pytest.mark.chaos

ENTRIES = 12


def make_log(directory: Path) -> list[tuple[Path, list[int]]]:
    """Two segments (8 + 4 entries); returns each segment and its frame offsets."""
    with WriteAheadLog(directory, "always", segment_entries=8) as wal:
        for i in range(ENTRIES):
            wal.append("put", {"i": i, "pad": "p" * (i * 3)})
    layout = []
    for _, path in list_segments(directory):
        raw, offsets, at = path.read_bytes(), [], 0
        while at < len(raw):
            offsets.append(at)
            at += FRAME.size + int.from_bytes(raw[at : at + 4], "big")
        layout.append((path, offsets))
    return layout


def outcome(directory: Path) -> tuple[str, object]:
    """Open and read the whole log: ('ok', entries, repair) or ('corrupt', context)."""
    try:
        with WriteAheadLog(directory, "off") as wal:
            entries = [(e.seq, e.data) for e in wal.entries_after(0)]
            return "ok", (entries, wal.repaired)
    except WalCorruption as exc:
        return "corrupt", exc.context


@pytest.fixture
def pristine(tmp_path: Path) -> tuple[Path, list[tuple[Path, list[int]]], list[object]]:
    base = tmp_path / "pristine"
    layout = make_log(base)
    _, (entries, _) = outcome(base)  # type: ignore[misc]
    return base, layout, entries


def damaged_copy(base: Path, target: Path, name: str, change: object) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target)
    path = target / name
    path.write_bytes(change(path.read_bytes()))  # type: ignore[operator]
    return path


def test_every_bit_flip_in_any_segment_is_detected(
    tmp_path: Path, pristine: tuple[Path, list[tuple[Path, list[int]]], list[object]]
) -> None:
    base, layout, entries = pristine
    for index, (segment, offsets) in enumerate(layout):
        last = index == len(layout) - 1
        size = segment.stat().st_size
        for pos in range(size):

            def flip(raw: bytes, pos: int = pos) -> bytes:
                return raw[:pos] + bytes([raw[pos] ^ (1 << (pos % 8))]) + raw[pos + 1 :]

            path = damaged_copy(base, tmp_path / "case", segment.name, flip)
            kind, detail = outcome(tmp_path / "case")
            frame_start = max(o for o in offsets if o <= pos)
            if last and frame_start == offsets[-1]:
                # the last entry of the last segment: a torn tail, cut and reported
                assert kind == "ok", (segment.name, pos, detail)
                got, repair = detail  # type: ignore[misc]
                assert repair is not None and repair.offset == frame_start
                assert got == entries[:-1]
            else:
                assert kind == "corrupt", (segment.name, pos, detail)
                assert detail == {"segment": str(path), "offset": frame_start}


def test_every_truncation_is_detected(
    tmp_path: Path, pristine: tuple[Path, list[tuple[Path, list[int]]], list[object]]
) -> None:
    base, layout, entries = pristine
    (first, first_offsets), (second, second_offsets) = layout
    for cut in range(first.stat().st_size):
        damaged_copy(base, tmp_path / "case", first.name, lambda raw, cut=cut: raw[:cut])
        kind, detail = outcome(tmp_path / "case")
        assert kind == "corrupt", (cut, detail)
    for cut in range(second.stat().st_size):
        damaged_copy(base, tmp_path / "case", second.name, lambda raw, cut=cut: raw[:cut])
        kind, detail = outcome(tmp_path / "case")
        assert kind == "ok"
        got, repair = detail  # type: ignore[misc]
        whole = sum(1 for o in second_offsets[1:] if o <= cut)
        assert got == entries[: len(first_offsets) + whole]
        assert (repair is None) == (cut in second_offsets)


def test_every_damaged_checkpoint_is_detected_and_the_previous_used(tmp_path: Path) -> None:
    base = tmp_path / "store"
    store = StateStore(base, fsync="always")
    for i in range(30):
        store.log("memory_add", {"content": f"block {i}" * (i + 1)})
        if i in (9, 19):
            store.checkpoint()
    store.wal.close()
    older, newest = list_checkpoints(checkpoint_dir(base))
    size = newest.stat().st_size
    positions = sorted(set(range(0, 256)) | set(range(256, size, max(1, (size - 256) // 64))))
    for pos in positions:

        def flip(raw: bytes, pos: int = pos) -> bytes:
            return raw[:pos] + bytes([raw[pos] ^ 0x80]) + raw[pos + 1 :]

        path = damaged_copy(base, tmp_path / "case", f"checkpoints/{newest.name}", flip)
        with pytest.raises(WalCorruption):
            read_checkpoint(path)
    for pos in (0, 100, 255, 256, size - 1):
        damaged_copy(
            base,
            tmp_path / "case",
            f"checkpoints/{newest.name}",
            lambda raw, pos=pos: raw[:pos] + bytes([raw[pos] ^ 1]) + raw[pos + 1 :],
        )
        recovered = StateStore(tmp_path / "case")
        assert recovered.state["memory"] == [f"block {i}" * (i + 1) for i in range(30)]
        assert recovered.last_recovery.checkpoint == tmp_path / "case/checkpoints" / older.name
        assert recovered.last_recovery.entries_replayed == 20
        recovered.wal.close()
    for cut in (0, 10, 255, 256, size - 1):
        path = damaged_copy(
            base, tmp_path / "case", f"checkpoints/{newest.name}", lambda raw, cut=cut: raw[:cut]
        )
        with pytest.raises(WalCorruption):
            read_checkpoint(path)
