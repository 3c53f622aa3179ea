"""The log against a model: random appends, reopens, flushes and compactions."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amber.errors import WalError
from amber.wal import WriteAheadLog

step = st.one_of(
    st.tuples(st.just("append"), st.integers() | st.text(max_size=20) | st.binary(max_size=20)),
    st.tuples(st.just("reopen"), st.sampled_from(["always", "batch", "off"])),
    st.tuples(st.just("flush"), st.none()),
    st.tuples(st.just("drop"), st.integers(min_value=0, max_value=60)),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(step, max_size=60))
def test_log_matches_a_model(steps: list[tuple[str, Any]]) -> None:
    model: list[Any] = []
    with tempfile.TemporaryDirectory() as directory:
        wal = WriteAheadLog(directory, "batch", batch_entries=3, segment_entries=4)
        for action, arg in steps:
            if action == "append":
                if isinstance(arg, int) and not -(2**63) <= arg < 2**64:
                    with pytest.raises(WalError):  # msgpack cannot hold it: refused, no seq used
                        wal.append("put", arg)
                    continue
                assert wal.append("put", arg) == len(model) + 1
                model.append(arg)
            elif action == "reopen":
                wal.close()
                wal = WriteAheadLog(directory, arg, batch_entries=3, segment_entries=4)
                assert wal.last_seq == len(model) and wal.repaired is None
            elif action == "flush":
                wal.flush()
            else:
                wal.drop_through(arg)
            first = wal.first_seq
            got = [(e.seq, e.data) for e in wal.entries_after(first - 1)]
            assert got == [(s, model[s - 1]) for s in range(first, len(model) + 1)]
        wal.close()
