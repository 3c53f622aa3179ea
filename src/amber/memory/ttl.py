"""``L1TTLManager``: 24 h while an analysis runs, 14 d while it is paused."""

from __future__ import annotations

from typing import cast

import redis

from amber.keys import Keys, check_id
from amber.memory.reading import redis_errors


class L1TTLManager:
    """Sets the TTL of every key of an agent: L1 keys, index, sequence, epoch and snapshot.

    Keys the agent gave an own TTL (``AgentMemory.expire``) keep it: their expiry is
    intended, and a pause or resume does not move it.
    """

    def __init__(
        self, client: redis.Redis, keys: Keys, active_ttl: int, paused_ttl: int, snapshot_ttl: int
    ) -> None:
        self.redis = client
        self.keys = keys
        self.ACTIVE_TTL = active_ttl
        self.PAUSED_TTL = paused_ttl
        self.SNAPSHOT_TTL = snapshot_ttl

    def _set(self, agent_id: str, l1_ttl: int, snapshot_ttl: int, extra: list[str]) -> int:
        agent_id = check_id(agent_id, "agent_id")
        k = self.keys
        with redis_errors(agent_id):
            index = cast(dict[bytes, bytes], self.redis.hgetall(k.l1_index(agent_id)))
            names = [n.decode() for n, entry in index.items() if not entry.endswith(b":own")]
            with self.redis.pipeline(transaction=False) as pipe:
                for full in [k.l1(agent_id, n) for n in names]:
                    pipe.expire(full, l1_ttl)
                pipe.expire(k.l1_index(agent_id), l1_ttl)
                pipe.expire(k.l1_seq(agent_id), l1_ttl)
                pipe.expire(k.l1_epoch(agent_id), l1_ttl)
                pipe.expire(k.l1_changes(agent_id), l1_ttl)
                for full in [k.l1_snapshot(agent_id), k.l1_snapshot_meta(agent_id), *extra]:
                    pipe.expire(full, snapshot_ttl)
                pipe.execute()
        return len(names)

    def extend_ttl_on_pause(self, agent_id: str, extra_keys: list[str] | None = None) -> int:
        """Give the agent's keys (and ``extra_keys``) the paused TTL; returns L1 keys touched
        (keys with an own TTL are left as they are)."""
        return self._set(agent_id, self.PAUSED_TTL, self.PAUSED_TTL, extra_keys or [])

    def restore_active_ttl_on_resume(
        self, agent_id: str, extra_keys: list[str] | None = None
    ) -> int:
        """Back to the active TTL for L1 (snapshot TTL for snapshots); returns keys touched."""
        return self._set(agent_id, self.ACTIVE_TTL, self.SNAPSHOT_TTL, extra_keys or [])
