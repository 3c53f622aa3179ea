"""The retention planners: pure functions, checked by properties."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from amber.wal.files import expired_checkpoints
from amber.wal.segments import removable_segments

firsts_strategy = st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=8).map(
    lambda sizes: [1 + sum(sizes[:i]) for i in range(len(sizes))]
)


@given(firsts_strategy, st.integers(min_value=0, max_value=500))
def test_removed_segments_hold_only_entries_at_or_before_the_seq(
    firsts: list[int], through: int
) -> None:
    removed = removable_segments(firsts, through)
    assert firsts[-1] not in removed  # the segment being written is never removed
    for first in removed:
        nxt = firsts[firsts.index(first) + 1]
        assert nxt - 1 <= through  # every entry in it is <= through
    kept = [f for f in firsts if f not in removed]
    assert kept[0] <= through + 1 or kept[0] == firsts[0]  # entries after `through` remain


@given(
    st.lists(st.floats(min_value=0, max_value=1e6), min_size=0, max_size=10).map(sorted),
    st.floats(min_value=0, max_value=2e6),
    st.floats(min_value=0, max_value=1e6),
    st.integers(min_value=1, max_value=5),
)
def test_expiry_keeps_the_newest_and_only_deletes_old_ones(
    times: list[float], now: float, retention: float, keep: int
) -> None:
    paths = [Path(f"{i:03d}.ckpt") for i in range(len(times))]
    expired = expired_checkpoints(paths, times, now=now, retention=retention, keep=keep)
    assert len(paths) - len(expired) >= min(keep, len(paths))
    assert not set(expired) & set(paths[-keep:])
    assert all(now - times[paths.index(p)] > retention for p in expired)
