"""amber's local durability: a write-ahead log, checkpoint files, and a store built on both.

* ``WriteAheadLog`` — checksummed, segmented, thread-safe append log with an
  fsync policy (``always``, ``batch``, ``off``).
* ``write_checkpoint`` / ``read_checkpoint`` — atomic, verified, zstd-compressed
  msgpack checkpoint files with a 256-byte header.
* ``StateStore`` — an agent's state made durable: log first, apply, checkpoint,
  recover.

See docs/wal.md for the formats, the loss window of each policy and the CLI.
"""

from amber.wal.files import read_checkpoint, read_header, write_checkpoint
from amber.wal.format import Entry, Header
from amber.wal.log import WriteAheadLog
from amber.wal.metrics import Metrics, NullMetrics, RecordingMetrics
from amber.wal.operations import Operations, initial_state
from amber.wal.retention import Compaction, compact
from amber.wal.segments import TailRepair
from amber.wal.store import Recovery, StateStore

__all__ = [
    "Compaction",
    "Entry",
    "Header",
    "Metrics",
    "NullMetrics",
    "Operations",
    "RecordingMetrics",
    "Recovery",
    "StateStore",
    "TailRepair",
    "WriteAheadLog",
    "compact",
    "initial_state",
    "read_checkpoint",
    "read_header",
    "write_checkpoint",
]
