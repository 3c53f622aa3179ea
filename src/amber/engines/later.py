"""A Redis command sent now whose reply is read later, so the caller's next round trip
(a PostgreSQL commit, the next put) overlaps it instead of following it.

The command goes out on a connection of its own, taken from the client's pool and held
until its reply is read. A cluster client has no single pool: ``send`` then returns
None and the caller makes the call the ordinary way.
"""

from __future__ import annotations

import os
from typing import Any

import redis


class Pending:
    """One command whose reply is still due."""

    def __init__(self, pool: redis.ConnectionPool, conn: redis.connection.Connection) -> None:
        self.pool = pool
        self.conn = conn
        self.pid = os.getpid()

    @classmethod
    def send(cls, client: redis.Redis, *command: Any) -> Pending | None:
        """Send ``command`` without waiting for its reply; None when it could not be sent
        (no pool, no connection, a failed send): the caller makes the call itself."""
        pool: redis.ConnectionPool | None = getattr(client, "connection_pool", None)
        if pool is None:
            return None
        try:
            conn = pool.get_connection()
        except (redis.RedisError, OSError):
            return None
        try:
            conn.send_command(*command)  # type: ignore[no-untyped-call]
        except (redis.RedisError, OSError):
            conn.disconnect()  # type: ignore[no-untyped-call]
            pool.release(conn)
            return None
        return cls(pool, conn)

    def reply(self) -> Any:
        """The reply, a ``redis.ResponseError`` returned rather than raised; a lost
        connection raises. The connection goes back to its pool either way. In a forked
        child the parent's reply is not ours to read: ``redis.ConnectionError``."""
        if self.pid != os.getpid():
            raise redis.ConnectionError("a reply sent before fork is not this process's")
        try:
            return self.conn.read_response()
        except redis.ResponseError as exc:
            return exc
        except BaseException:
            self.conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            self.pool.release(self.conn)
