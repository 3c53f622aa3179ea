"""The servers a chaos run uses, and the Redis losses it inflicts on them.

Redis is the engine's own embedded redis-server, in its own directory, unless a
URL is given: only an own server can be really restarted (it runs without
persistence, so a restart loses everything). PostgreSQL is the given database
(the suite's, in pytest) or an embedded one for the run.
"""

from __future__ import annotations

from pathlib import Path

import redis

from amber.engines.embedded import EmbeddedPostgres, EmbeddedRedis, ensure_embedded


class ChaosRedis:
    """The run's Redis: flushed of the run's keys, or restarted empty."""

    def __init__(self, url: str | None, home: Path) -> None:
        self.own = EmbeddedRedis(home) if url is None else None
        self.url = self.own.ensure() if self.own is not None else str(url)

    @property
    def can_restart(self) -> bool:
        """Only an own server can be restarted."""
        return self.own is not None

    def flush(self, prefix: str) -> int:
        """Lose every key of the run at once, as a flush or a restart does: FLUSHALL on the
        run's own server; on an external one, a delete of ``<prefix>:*`` (not atomic:
        keys written meanwhile survive, a partial loss); returns how many went."""
        client = redis.Redis.from_url(self.url)
        try:
            if self.own is not None:
                n = int(client.dbsize())
                client.flushall()
                return n
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i : i + 500])
            return len(keys)
        finally:
            client.close()

    def restart(self) -> None:
        """Stop and start the own server: everything in it is gone."""
        assert self.own is not None, "an external Redis is never restarted"
        self.own.stop()
        self.own.ensure()

    def close(self, prefix: str, flush: bool) -> None:
        """Stop the own server; with ``flush``, remove the run's keys from an external one."""
        if self.own is not None:
            self.own.stop()
        elif flush:
            self.flush(prefix)


class ChaosPostgres:
    """The run's PostgreSQL: the given database, or an embedded server for the run."""

    def __init__(self, url: str | None, home: Path) -> None:
        self.home = home
        self.own = url is None
        self.url = ensure_embedded(home, redis=False)["postgres"] if url is None else url

    def close(self) -> None:
        """Stop the embedded server if the run started one."""
        if self.own:
            EmbeddedPostgres(self.home.resolve()).stop()
