"""Kill the Sentinel-managed primary while agents write memory and checkpoint; nothing is lost.

The Sentinel set is this test's own (``tests.sentinel.LocalSentinel``: a primary, two
replicas, three Sentinels on loopback ports); PostgreSQL is the suite's. Agents run
through ``redis+sentinel://…/amber``; the primary is SIGKILLed, the Sentinels promote a
replica, and the same client finds it: no restart, no completed subtask run twice,
every checkpoint PostgreSQL acknowledged is there, and every memory verifies or is
recovered from PostgreSQL.
"""

from __future__ import annotations

import time

import redis

import amber
from amber.engines.connect import open_redis

from ..cluster import HOST
from ..conftest import Engines
from ..sentinel import LocalSentinel
from .test_cluster_failover import Workload


def test_primary_killed_mid_workload_the_replica_takes_over(engines: Engines) -> None:
    with LocalSentinel() as sentinel:
        stack = amber.connect(
            sentinel.url,
            engines.database_url,
            prefix=f"{engines.prefix}-sfo",
            redis_retry_seconds=30,
            durability="checkpoint",
        )
        with stack:
            work = Workload.start(stack, "sfo")
            time.sleep(1.0)
            old = sentinel.primary_port()
            killed_at = time.time()
            sentinel.kill(old)
            new = sentinel.wait_promoted(old)
            promoted_after = time.time() - killed_at
            retried, window = work.join(killed_at)
            print(
                f"\nsentinel failover: killed primary :{old} at +1.0s, :{new} promoted"
                f" {promoted_after:.2f}s later; {retried} command retries,"
                f" {len(work.failures)} failed operations seen by the workload,"
                f" {sum(work.again.values())} steps in flight run again,"
                f" window {window:.2f}s"
            )
            assert stack.redis.connection_pool.get_master_address()[1] == new  # type: ignore[attr-defined]
            work.check()


def test_a_write_after_a_forced_failover_goes_to_the_new_primary_once() -> None:
    """``SENTINEL FAILOVER`` demotes a live primary (and closes its clients' connections):
    the client's next write reaches the new primary, and is applied once."""
    with LocalSentinel() as sentinel:
        client = open_redis(sentinel.url, 1.0, retry_seconds=30)
        try:
            old = sentinel.primary_port()
            client.rpush("demoted:list", "before")
            sentinel.failover()  # promote a replica; the old primary becomes its replica
            new = sentinel.wait_promoted(old)
            sentinel.wait_role(old, "slave")
            assert client.rpush("demoted:list", "after") == 2  # on the new primary, once
            direct = redis.Redis(HOST, new)
            assert direct.lrange("demoted:list", 0, -1) == [b"before", b"after"]
        finally:
            client.close()
