"""Benchmark of amber's WAL and checkpoint files, each beside the raw engine in the same run.

Run: ``.venv/bin/python bench/bench_wal.py [--quick] [--big]`` (``--big`` adds a
500 MB state; ``--quick`` is a small smoke run).

Every row prints the median and p99 time of one operation and the ratio to the
raw engine: a plain ``os.write`` (+ ``os.fsync``) loop of the same bytes for
appends, writing or reading the same file bytes for checkpoints and replay.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import zstandard

from amber.wal import StateStore, WriteAheadLog
from amber.wal.files import list_checkpoints
from amber.wal.format import encode_entry, pack
from amber.wal.retention import checkpoint_dir

Row = tuple[str, str, float, float, str, str]
ROWS: list[Row] = []


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) of samples, nearest rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def row(case: str, unit: str, samples: list[float], rate: str = "", vs: str = "") -> None:
    """Record one table row from per-operation samples in seconds."""
    ROWS.append((case, unit, statistics.median(samples), pct(samples, 0.99), rate, vs))


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of fn takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ms(seconds: float) -> str:
    """Milliseconds, four significant digits."""
    return f"{seconds * 1e3:.4g}"


def fmt_time(seconds: float) -> str:
    """Human scale: µs, ms or s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


# -- appends ------------------------------------------------------------------------


def data_for(i: int) -> dict[str, Any]:
    """A typical small L1 write: key, value, type."""
    return {"key": f"agent:notes:{i % 50}", "value": f"value {i} " * 4, "type": "string"}


def bench_appends(root: Path, n_always: int, n_batched: int) -> None:
    """Append throughput per policy, beside the raw loop of the same bytes."""
    datas = [data_for(i) for i in range(n_batched)]  # built outside every timed loop
    frames = [encode_entry(i + 1, time.time(), "set", d) for i, d in enumerate(datas)]
    batch = 100

    def amber_run(policy: str, n: int) -> tuple[list[float], float]:
        path = root / f"wal-{policy}"
        shutil.rmtree(path, ignore_errors=True)
        lat = []
        with WriteAheadLog(path, policy) as wal:  # type: ignore[arg-type]
            append = wal.append
            start = time.perf_counter()
            for data in datas[:n]:
                t0 = time.perf_counter()
                append("set", data)
                lat.append(time.perf_counter() - t0)
            wal.flush()
            total = time.perf_counter() - start
        return lat, n / total

    def raw_run(n: int, group: int, sync: bool) -> tuple[list[float], float]:
        path = root / "raw.log"
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        lat = []
        start = time.perf_counter()
        for i in range(0, n, group):
            t0 = time.perf_counter()
            os.write(fd, b"".join(frames[i : i + group]))
            if sync:
                os.fsync(fd)
            lat.append(time.perf_counter() - t0)
        os.fsync(fd)
        total = time.perf_counter() - start
        os.close(fd)
        return lat, n / total

    cases = [
        ("always", n_always, 1, True, "raw write+fsync per entry"),
        ("batch", n_batched, batch, True, f"raw write+fsync per {batch} entries"),
        ("off", n_batched, batch, False, f"raw write per {batch} entries"),
    ]
    for policy, n, group, sync, raw_name in cases:
        rates, raw_rates, lats, raw_lats = [], [], [], []
        for rep in range(6):  # interleaved, in turns first, so disk noise hits both alike
            if rep % 2:
                raw_lat, raw_rate = raw_run(n, group, sync)
                lat, rate = amber_run(policy, n)
            else:
                lat, rate = amber_run(policy, n)
                raw_lat, raw_rate = raw_run(n, group, sync)
            rates.append(rate)
            raw_rates.append(raw_rate)
            lats += lat
            raw_lats += raw_lat
        amber_rate, raw_rate = statistics.median(rates), statistics.median(raw_rates)
        row(raw_name, "per call", raw_lats, f"{raw_rate:,.0f}/s", "1.00")
        row(
            f"append fsync={policy}",
            "per append",
            lats,
            f"{amber_rate:,.0f}/s",
            f"{amber_rate / raw_rate:.2f}",
        )


# -- states, checkpoints, recovery ----------------------------------------------------

WORDS = [
    "".join(random.Random(i).choices("abcdefghijklmnopqrstuvwxyz", k=3 + i % 7))
    for i in range(2000)
]


def make_state(size: int, seed: int = 1) -> dict[str, Any]:
    """An agent state of about ``size`` msgpack bytes: text memory blocks, tools, metrics."""
    rng = random.Random(seed)
    blocks: list[Any] = []
    total = 0
    while total < size:
        text = " ".join(rng.choices(WORDS, k=170))
        blocks.append({"text": text, "score": rng.random(), "tokens": len(text) // 4})
        total += len(text) + 40
    return {
        "memory": blocks,
        "tools": {f"tool_{i}": {"url": f"https://tools/{i}", "calls": i} for i in range(50)},
        "state": {"step": 1, "history": [rng.random() for _ in range(1000)]},
    }


def bench_checkpoints(root: Path, sizes: list[tuple[str, int]], replay: int) -> None:
    """Checkpoint create and recovery (with ``replay`` entries after it), beside raw I/O."""
    for label, size in sizes:
        directory = root / f"store-{label}"
        shutil.rmtree(directory, ignore_errors=True)
        state = make_state(size)
        store = StateStore(directory, apply=lambda s, op, d: s, initial=state, fsync="off")
        creates, raw_writes = [], []
        for _ in range(3):
            creates.append(timed(store.checkpoint))
            blob = list_checkpoints(checkpoint_dir(directory))[-1].read_bytes()
            raw_writes.append(timed(lambda blob=blob: raw_write(root / "raw.ckpt", blob)))
        file_size = len(blob)
        for i in range(replay):
            store.log("memory_add", {"content": data_for(i)})
        store.wal.flush()
        store.wal.close()  # a crash: recovery must replay the entries after the checkpoint
        recoveries, raw_reads = [], []
        for _ in range(3):
            recoveries.append(timed(lambda d=directory, s=state: reopen(d, s)))
            newest = list_checkpoints(checkpoint_dir(directory))[-1]
            wal = directory / "wal"
            raw_reads.append(timed(lambda n=newest, w=wal: raw_read(n, w)))
        mb = size / 1e6
        ratio = f"{statistics.median(creates) / statistics.median(raw_writes):.1f}"
        row(f"raw write+fsync of the {mb:.0f} MB state's file", "per file", raw_writes, "", "1.0")
        row(
            f"checkpoint {mb:.0f} MB ({file_size / 1e6:.1f} MB on disk)",
            "per call",
            creates,
            "",
            ratio,
        )
        ratio = f"{statistics.median(recoveries) / statistics.median(raw_reads):.1f}"
        row(
            f"raw read of the {mb:.0f} MB state's checkpoint + log",
            "per read",
            raw_reads,
            "",
            "1.0",
        )
        row(f"recover {mb:.0f} MB + replay {replay:,}", "per call", recoveries, "", ratio)
        shutil.rmtree(directory)


def raw_write(path: Path, blob: bytes) -> None:
    """Write and fsync bytes, the physical cost of a checkpoint file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, blob)
    os.fsync(fd)
    os.close(fd)


def read_all(directory: Path) -> int:
    """Read every file of a directory (the raw cost of loading it)."""
    return sum(len(p.read_bytes()) for p in directory.iterdir())


def raw_read(checkpoint: Path, wal: Path) -> int:
    """Read the checkpoint file and the log: the raw cost of a recovery."""
    return len(checkpoint.read_bytes()) + read_all(wal)


def reopen(directory: Path, state: Any) -> None:
    """Recover a store (checkpoint + replay) and leave its files as they were."""
    store = StateStore(directory, apply=lambda s, op, d: s, initial=state, fsync="off")
    store.wal.close()


def bench_replay(root: Path, counts: list[int]) -> None:
    """Replay of N entries from the log alone (no checkpoint), beside reading its bytes."""
    for n in counts:
        directory = root / f"replay-{n}"
        shutil.rmtree(directory, ignore_errors=True)
        store = StateStore(directory, fsync="off", checkpoint_entries=n + 1)
        for i in range(n):
            store.log("memory_add", {"content": data_for(i)})
        store.wal.flush()
        store.wal.close()
        replays, raws = [], []
        for _ in range(3):
            replays.append(timed(lambda directory=directory: replay_once(directory)))
            raws.append(timed(lambda directory=directory: read_all(directory / "wal")))
        rate = f"{n / statistics.median(replays):,.0f}/s"
        row(f"raw read of the {n:,}-entry log", "per read", raws, "", "1.0")
        ratio = f"{statistics.median(replays) / statistics.median(raws):.1f}"
        row(f"replay {n:,} entries (memory_add)", "per call", replays, rate, ratio)
        shutil.rmtree(directory)


def replay_once(directory: Path) -> None:
    """Recover a store from its log alone."""
    StateStore(directory, fsync="off", checkpoint_entries=10**9).wal.close()


def bench_levels(size: int) -> list[str]:
    """zstd levels 1, 3 and 9 on the same state: size and time."""
    body = pack(make_state(size, seed=2))
    lines = [f"zstd levels on a {size / 1e6:.0f} MB msgpack state (3 runs each, median)"]
    lines.append(
        f"{'level':>5} {'compressed':>12} {'ratio':>6} {'compress':>10} {'decompress':>11}"
    )
    for level in (1, 3, 9):
        compressor = zstandard.ZstdCompressor(level=level)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            out = compressor.compress(body)
            times.append(time.perf_counter() - start)
        dtimes = [
            timed(lambda out=out: zstandard.ZstdDecompressor().decompress(out)) for _ in range(3)
        ]
        lines.append(
            f"{level:>5} {len(out) / 1e6:>9.2f} MB {len(body) / len(out):>6.2f} "
            f"{fmt_time(statistics.median(times)):>10} {fmt_time(statistics.median(dtimes)):>11}"
        )
    return lines


def main() -> None:
    """Run every benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--big", action="store_true", help="also a 500 MB state")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--dir", help="where to write (default: a temp dir under ./.amber)")
    args = parser.parse_args()
    base = Path(args.dir or ".amber")
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-wal-", dir=base))
    print(f"command: {sys.executable} {' '.join(sys.argv)}")
    print(
        f"machine: nproc={os.cpu_count()} python={platform.python_version()} "
        f"{platform.system()} {platform.machine()}; files under {root.resolve()}"
    )
    print(
        "versions: "
        + ", ".join(f"{p} {version(p)}" for p in ("amber", "msgpack", "zstandard"))
        + f", zstd {zstandard.ZSTD_VERSION}"
    )
    sizes = [("1MB", 1_000_000)]
    if not args.quick:
        sizes += [("50MB", 50_000_000)] + ([("500MB", 500_000_000)] if args.big else [])
    try:
        if args.quick:
            bench_appends(root, n_always=100, n_batched=5_000)
        else:
            bench_appends(root, n_always=1_000, n_batched=100_000)
        bench_checkpoints(root, sizes, replay=1_000)
        bench_replay(root, [1_000] if args.quick else [1_000, 100_000])
        levels = bench_levels(1_000_000 if args.quick else 50_000_000)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print("vs raw: amber's throughput / the raw row's above it (appends), or amber's p50 /")
    print("the raw row's p50 (checkpoint, recovery, replay: how many times the bare I/O).")
    head = (
        f"{'operation':<48} {'unit':<11} {'p50 ms':>10} {'p99 ms':>10} {'rate':>12} {'vs raw':>7}"
    )
    print(head)
    for case, unit, median, p99, rate, vs in ROWS:
        print(f"{case:<48} {unit:<11} {ms(median):>10} {ms(p99):>10} {rate:>12} {vs:>7}")
    print()
    print("\n".join(levels))


if __name__ == "__main__":
    main()
