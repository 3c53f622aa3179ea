"""The chaos engine's children, without servers: they wait for an order, and none is left behind."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.chaos.procs import Pool
from tests.chaos.worker import Order


def test_children_wait_for_an_order_and_the_pool_leaves_none_behind(tmp_path: Path) -> None:
    with (tmp_path / "children.log").open("ab") as stderr:
        pool = Pool(2, stderr)
        try:
            waiting, doomed, refused = pool.take(), pool.take(), pool.take()
            children = list(pool.started)
            assert len(children) == 3 + 2  # two kept ahead of the three taken
            idle = [c for c in children if c not in (waiting, doomed, refused)]
            assert waiting.readline(0.5) is None  # nothing printed before its order
            assert doomed.kill("test") and doomed.wait(10) == -signal.SIGKILL
            assert not doomed.kill("again") and doomed.killed_by == "test"
            bad = Order("dance", "-", "wal", "-", "-", str(tmp_path), "-", str(tmp_path / "l"))
            refused.send(bad.to_json())  # refused before it connects: no ready, non-zero exit
            assert refused.readline(30) is None and refused.wait(30) not in (0, None)
        finally:
            pool.close()
    assert not [c for c in children if c.alive()]
    assert waiting.killed_by == "engine closing"
    assert [c.proc.returncode for c in idle] == [0, 0]  # told to exit, they did
