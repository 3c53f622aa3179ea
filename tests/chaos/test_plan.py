"""The chaos plan and table: choices that follow from the seed, a table that names everything."""

from __future__ import annotations

import pytest

from tests.chaos.report import FAILURE_ROWS, KILL_ROWS, AnalysisCounts, Tally
from tests.chaos.rounds import (
    KINDS,
    MODES,
    REDIS_KINDS,
    choose_kind,
    choose_mode,
    possible_kinds,
    round_rng,
)


def test_the_table_names_every_measure_the_seed_and_the_replay() -> None:
    tally = Tally(seed=1234, rounds_planned=200, replay_args="--modes wal")
    tally.rounds = 200
    tally.analyses["a"] = AnalysisCounts()
    tally.analyses["a"].kills.update({"commit": 3, "subtask": 2})
    text = tally.table()
    for _, label in KILL_ROWS + FAILURE_ROWS:
        assert label in text
    assert "| seed " in text and "1234" in text
    assert "replay: python -m tests.chaos.rounds --rounds 200 --seed 1234 --modes wal" in text
    assert dict(tally.rows())["re-executions of committed subtasks"] == "0"
    assert dict(tally.rows())["kills: around a PostgreSQL commit, before its Redis write"] == "3"
    assert tally.ok
    tally.analyses["a"].duplicate_calls = 1
    assert not tally.ok and tally.failure_counts()["duplicate_calls"] == 1


def test_the_plan_is_a_function_of_the_seed_and_the_round() -> None:
    plan = [choose_kind(round_rng(7, n), "wal", True) for n in range(1, 400)]
    assert plan == [choose_kind(round_rng(7, n), "wal", True) for n in range(1, 400)]
    assert set(plan) == set(KINDS)
    assert [choose_mode(7, k) for k in range(50)] == [choose_mode(7, k) for k in range(50)]
    assert set(choose_mode(7, k) for k in range(200)) == set(MODES)
    assert {choose_mode(7, k, ("wal",)) for k in range(20)} == {"wal"}


@pytest.mark.parametrize("mode", MODES)
def test_redis_is_lost_under_analyses_of_every_mode(mode: str) -> None:
    assert set(REDIS_KINDS) <= set(possible_kinds(mode, True))
    assert {choose_kind(round_rng(3, n), mode, True) for n in range(300)} == {
        "kill",
        "commit",
        "pause",
        "flush",
        "restart",
    }


def test_an_external_redis_is_flushed_never_restarted() -> None:
    assert "restart" not in possible_kinds("wal", can_restart=False)
    assert "flush" in possible_kinds("wal", can_restart=False)
