"""A PostgreSQL failover under running workers, one round: ``make test-pg-failover`` runs
more (``tests.chaos.pg_failover``). The seed is printed first; replay a failure with
``PG_FAILOVER_SEED=<seed>`` or ``python -m tests.chaos.pg_failover --seed``."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from tests.chaos.pg_failover import run_failover

from ..conftest import Engines

pytestmark = pytest.mark.chaos


def test_workers_follow_a_promoted_standby_and_nothing_acknowledged_is_lost(
    engines: Engines, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("PG_FAILOVER_SEED") or secrets.randbits(32))
    with capsys.disabled():
        print(f"\npg failover seed {seed}", flush=True)
        tally = run_failover(seed, tmp_path)
        print(tally.table(), flush=True)
    assert tally.problems == [], tally.table()
    assert tally.analyses == 12 and tally.acked > 0, tally.table()
    assert tally.steps_before > 0, tally.table()  # the primary died mid-workload


def test_status_names_the_primary_before_and_after_a_failover(engines: Engines) -> None:
    from typer.testing import CliRunner

    from amber.cli import app
    from tests.pg_pair import PgPair

    runner = CliRunner()
    with PgPair() as pair:
        env = {"AMBER_DATABASE_URL": pair.url, "COLUMNS": "200", "AMBER_CONNECT_TIMEOUT": "2"}
        before = runner.invoke(app, ["status", "--json"], env=env)
        assert before.exit_code == 0, before.output
        assert f":{pair.ports[0]}" in before.output
        pair.kill_primary()
        pair.promote()
        after = runner.invoke(app, ["status"], env=env)
        if after.exit_code != 0:  # the first call may meet the old primary's cut connection
            after = runner.invoke(app, ["status"], env=env)
        assert after.exit_code == 0, after.output
        assert f"(primary 127.0.0.1:{pair.ports[1]})" in after.output
