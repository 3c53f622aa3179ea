"""A full disk or failing write: a clear WalError, and nothing acknowledged is lost."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from amber.errors import WalError
from amber.wal import StateStore, WriteAheadLog
from amber.wal.files import list_checkpoints, list_temp_files
from amber.wal.retention import checkpoint_dir

pytestmark = pytest.mark.chaos

REAL_WRITE = os.write
REAL_FSYNC = os.fsync


class Disk:
    """Stands in for os.write / os.fsync: ``room`` bytes left (None = unlimited)."""

    def __init__(self) -> None:
        self.room: int | None = None
        self.fsync_fails = False

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.room is None:
            return REAL_WRITE(fd, data)
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = REAL_WRITE(fd, bytes(data[: self.room]))
        self.room -= written
        return written

    def fsync(self, fd: int) -> None:
        if self.fsync_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        REAL_FSYNC(fd)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    d = Disk()
    monkeypatch.setattr(os, "write", d.write)
    monkeypatch.setattr(os, "fsync", d.fsync)
    yield d


def entries(directory: Path) -> list[object]:
    with WriteAheadLog(directory, "off") as wal:
        assert wal.repaired is None  # a failed write was undone, not left as a torn tail
        return [e.data for e in wal.entries_after(0)]


@pytest.mark.parametrize("room", [0, 7])
def test_always_full_disk_refuses_the_entry_and_keeps_the_rest(
    tmp_path: Path, disk: Disk, room: int
) -> None:
    wal = WriteAheadLog(tmp_path, "always")
    for i in range(10):
        wal.append("x", i)
    disk.room = room  # 7: half an entry gets written before ENOSPC
    with pytest.raises(WalError) as info:
        wal.append("x", 10)
    assert info.value.context["errno"] == errno.ENOSPC and "No space" in str(info.value)
    assert wal.last_seq == 10
    disk.room = None
    assert wal.append("x", 10) == 11
    wal.close()
    assert entries(tmp_path) == list(range(11))


def test_batch_full_disk_keeps_the_buffered_batch_for_retry(tmp_path: Path, disk: Disk) -> None:
    wal = WriteAheadLog(tmp_path, "batch", batch_entries=5)
    for i in range(5):
        wal.append("x", i)  # the fifth writes the batch
    disk.room = 0
    for i in range(5, 9):
        wal.append("x", i)
    with pytest.raises(WalError, match="No space"):
        wal.append("x", 9)  # would complete a batch: the write fails, this entry is refused
    with pytest.raises(WalError, match="No space"):
        wal.flush()
    assert wal.last_seq == 9  # values 0..8; value 9 was refused
    disk.room = None
    wal.flush()  # the retry writes everything acknowledged
    assert wal.append("x", 9) == 10
    wal.close()
    assert entries(tmp_path) == list(range(10))


def test_failed_fsync_stops_the_log_and_keeps_what_was_synced(tmp_path: Path, disk: Disk) -> None:
    wal = WriteAheadLog(tmp_path, "always")
    wal.append("x", 0)
    disk.fsync_fails = True
    with pytest.raises(WalError, match="fsync failed"):
        wal.append("x", 1)
    disk.fsync_fails = False
    with pytest.raises(WalError, match="earlier failure"):
        wal.append("x", 2)
    wal.close()
    assert entries(tmp_path)[0] == 0


def test_checkpoint_on_a_full_disk_leaves_no_file_and_loses_nothing(
    tmp_path: Path, disk: Disk
) -> None:
    store = StateStore(tmp_path, fsync="always")
    store.log("memory_add", {"content": "a"})
    first = store.checkpoint().path
    store.log("memory_add", {"content": "b" * 10_000})
    disk.room = 100  # less than the 256-byte header
    with pytest.raises(WalError, match="No space"):
        store.checkpoint()
    ckpts = checkpoint_dir(tmp_path)
    assert list_checkpoints(ckpts) == [first] and list_temp_files(ckpts) == []
    disk.room = None
    store.log("memory_add", {"content": "c"})
    store.close()
    with StateStore(tmp_path) as again:
        assert again.state["memory"] == ["a", "b" * 10_000, "c"]
