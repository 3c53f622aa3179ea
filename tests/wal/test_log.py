"""WriteAheadLog: append, read back, policies, rotation, threads, repair, errors."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from amber.errors import WalCorruption, WalError
from amber.wal import RecordingMetrics, WriteAheadLog
from amber.wal.segments import list_segments


def read_all(directory: Path) -> list[tuple[int, str, object]]:
    with WriteAheadLog(directory, "off") as wal:
        return [(e.seq, e.op, e.data) for e in wal.entries_after(0)]


@pytest.mark.parametrize("policy", ["always", "batch", "off"])
def test_append_then_read_back(tmp_path: Path, policy: str) -> None:
    with WriteAheadLog(tmp_path, policy) as wal:  # type: ignore[arg-type]
        seqs = [wal.append("put", {"i": i, "b": b"\x00\xff"}) for i in range(250)]
        assert seqs == list(range(1, 251)) and wal.last_seq == 250
        assert [e.data["i"] for e in wal.entries_after(200)] == list(range(200, 250))
    assert read_all(tmp_path)[-1] == (250, "put", {"i": 249, "b": b"\x00\xff"})


def test_reopen_continues_the_sequence(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path) as wal:
        wal.append("a", 1)
    with WriteAheadLog(tmp_path) as wal:
        assert wal.last_seq == 1 and wal.repaired is None
        assert wal.append("b", 2) == 2
    assert read_all(tmp_path) == [(1, "a", 1), (2, "b", 2)]


def test_segments_rotate(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path, segment_entries=10) as wal:
        for i in range(35):
            wal.append("x", i)
        assert [p.name for p in wal.segments][:2] == [f"{1:020d}.wal", f"{11:020d}.wal"]
        assert len(wal.segments) == 4
    assert [d for _, _, d in read_all(tmp_path)] == list(range(35))


def test_entries_timestamps_come_from_the_clock(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path, clock=lambda: 1234.5) as wal:
        wal.append("x")
        (entry,) = wal.entries_after(0)
    assert entry.timestamp == 1234.5 and entry.data is None


def test_appends_from_many_threads_get_unique_contiguous_seqs(tmp_path: Path) -> None:
    got: list[int] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        for i in range(500):
            seq = wal.append("t", [t, i])
            with lock:
                got.append(seq)

    with WriteAheadLog(tmp_path, "batch", segment_entries=700) as wal:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert sorted(got) == list(range(1, 2001))
    entries = read_all(tmp_path)
    per_thread: dict[int, list[int]] = {}
    for _, _, (t, i) in entries:  # type: ignore[misc]
        per_thread.setdefault(t, []).append(i)
    assert all(v == list(range(500)) for v in per_thread.values())


@pytest.mark.parametrize("policy", ["always", "batch", "off"])
def test_threads_rotation_and_small_batches_keep_order(tmp_path: Path, policy: str) -> None:
    def work(t: int) -> None:
        for i in range(300):
            wal.append("t", [t, i])

    wal = WriteAheadLog(tmp_path, policy, batch_entries=7, segment_entries=97)  # type: ignore[arg-type]
    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wal.close()
    entries = read_all(tmp_path)
    assert [seq for seq, _, _ in entries] == list(range(1, 2401))
    for t in range(8):
        assert [d[1] for _, _, d in entries if d[0] == t] == list(range(300))  # type: ignore[index]


def test_batch_is_written_after_batch_seconds_without_more_appends(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path, "batch", batch_entries=1000, batch_seconds=0.05) as wal:
        wal.append("x", 1)
        (_, path), *_ = list_segments(tmp_path)
        deadline = time.monotonic() + 10
        while path.stat().st_size == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert path.stat().st_size > 0


def test_metrics_report_batches(tmp_path: Path) -> None:
    metrics = RecordingMetrics()
    with WriteAheadLog(tmp_path, "batch", batch_entries=10, metrics=metrics) as wal:
        for i in range(25):
            wal.append("x", i)
    sizes = [f["batch_size"] for f in metrics.named("wal.appended")]
    assert sizes == [10, 10, 5]
    assert metrics.named("wal.appended")[-1]["entry_count"] == 25


def test_bad_input_is_a_wal_error(tmp_path: Path) -> None:
    with pytest.raises(WalError, match="fsync policy"):
        WriteAheadLog(tmp_path, "sometimes")  # type: ignore[arg-type]
    with WriteAheadLog(tmp_path) as wal:
        with pytest.raises(WalError):
            wal.append("", 1)
        with pytest.raises(WalError, match="msgpack"):
            wal.append("x", {1, 2})
        assert wal.append("x", 1) == 1  # a refused entry used no sequence
    with pytest.raises(WalError, match="closed"):
        wal.append("x", 2)


def test_torn_tail_is_cut_and_reported(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path, "always") as wal:
        for i in range(5):
            wal.append("x", i)
    (_, path), *_ = list_segments(tmp_path)
    size = path.stat().st_size
    with path.open("ab") as fh:
        fh.write(b"\x00\x00\x00\x30partial")
    with WriteAheadLog(tmp_path) as wal:
        assert wal.repaired is not None
        assert wal.repaired.offset == size and wal.repaired.bytes_cut == 11
        assert wal.last_seq == 5
        assert wal.append("x", 5) == 6
    assert [d for _, _, d in read_all(tmp_path)] == list(range(6))


def test_damage_in_the_middle_names_segment_and_offset(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path, "always") as wal:
        for i in range(5):
            wal.append("x", f"payload-{i}")
    (_, path), *_ = list_segments(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0x40  # inside the first entry's payload
    path.write_bytes(bytes(raw))
    with pytest.raises(WalCorruption) as info:
        WriteAheadLog(tmp_path)
    assert info.value.context == {"segment": str(path), "offset": 0}


def test_a_missing_segment_is_a_gap_not_a_skip(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path, segment_entries=5) as wal:
        for i in range(20):
            wal.append("x", i)
    list_segments(tmp_path)[1][1].unlink()
    with WriteAheadLog(tmp_path) as wal, pytest.raises(WalCorruption, match="expected 6"):
        list(wal.entries_after(0))


def test_entries_before_the_oldest_segment_are_refused(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path, segment_entries=5) as wal:
        for i in range(12):
            wal.append("x", i)
        removed = wal.drop_through(7)
        assert [p.name for p in removed] == [f"{1:020d}.wal"]
        assert wal.first_seq == 6
        assert [e.seq for e in wal.entries_after(5)] == list(range(6, 13))
        with pytest.raises(WalError, match="no longer in the log"):
            list(wal.entries_after(3))
        assert wal.drop_through(100) != [] and len(wal.segments) == 1  # never the last


def test_one_writer_per_directory(tmp_path: Path) -> None:
    with WriteAheadLog(tmp_path), pytest.raises(WalError, match="another WriteAheadLog"):
        WriteAheadLog(tmp_path)
    with WriteAheadLog(tmp_path) as wal:  # released on close
        assert wal.last_seq == 0


class Exploding:
    """A metrics hook that always raises."""

    def on_event(self, name: str, fields: object) -> None:
        raise RuntimeError("hook is broken")


@pytest.mark.parametrize("policy", ["always", "batch"])
def test_a_failing_metrics_hook_never_breaks_the_log(tmp_path: Path, policy: str) -> None:
    with WriteAheadLog(tmp_path, policy, batch_entries=2, metrics=Exploding()) as wal:  # type: ignore[arg-type]
        assert [wal.append("x", i) for i in range(5)] == [1, 2, 3, 4, 5]
    assert [d for _, _, d in read_all(tmp_path)] == list(range(5))
