"""A Redis command sent now whose reply is read later, so the caller's next round trip
(a PostgreSQL commit, the next put) overlaps it instead of following it.

The command goes out on a connection of its own, taken from the client's pool and held
until its reply is read. ``hold`` takes that connection before the commands are known
(``send_now`` sends them later), so a caller can learn Redis is unreachable before doing
anything it cannot take back. A cluster client has no single pool: ``send`` and
``hold`` then return None and the caller makes the call the ordinary way.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from hiredis import pack_command


def _pack(commands: list[tuple[Any, ...]]) -> list[bytes]:
    """``commands`` in Redis's protocol, as one write: packed by hiredis directly, where
    redis-py's packer first copies each command's arguments in Python (and splits a
    command name holding a space, which amber's never do). ``redis.DataError`` for an
    argument that is not bytes, text or a number, as redis-py raises it."""
    try:
        return [b"".join([pack_command(command) for command in commands])]
    except TypeError as exc:
        raise redis.DataError(str(exc)) from None


class Pending:
    """Commands whose replies are still due, in the order they were sent."""

    def __init__(
        self, pool: redis.ConnectionPool, conn: redis.connection.Connection, count: int = 1
    ) -> None:
        self.pool = pool
        self.conn = conn
        self.count = count
        self.pid = os.getpid()
        self.done = False
        self._got: list[Any] | None = None

    @classmethod
    def send(cls, client: redis.Redis, *command: Any) -> Pending | None:
        """Send ``command`` without waiting for its reply; None when it could not be sent
        (no pool, no connection, a failed send): the caller makes the call itself."""
        pending = cls.hold(client)
        if pending is None:
            return None
        try:
            sent = pending.send_now([command])
        except (redis.RedisError, OSError):  # not packable: the caller's own call says why
            return None
        return pending if sent else None

    @staticmethod
    def can_hold(client: redis.Redis) -> bool:
        """Whether ``client`` has a pool to hold a connection from (a cluster client has
        none): where it has not, :meth:`send` and :meth:`hold` return None."""
        return getattr(client, "connection_pool", None) is not None

    @classmethod
    def hold(cls, client: redis.Redis) -> Pending | None:
        """A connection of ``client``'s, taken now for commands sent later
        (:meth:`send_now`); None when there is none to take (no pool, no connection)."""
        pool: redis.ConnectionPool | None = getattr(client, "connection_pool", None)
        if pool is None:
            return None
        try:
            conn = pool.get_connection()
        except (redis.RedisError, OSError):
            return None
        return cls(pool, conn, 0)

    def send_now(self, commands: list[tuple[Any, ...]]) -> bool:
        """Send ``commands`` on the held connection in one write; False (and the
        connection given back, dropped) when it could not be sent. Commands that cannot
        be packed raise, with nothing sent and the connection given back. Once only."""
        try:
            packed = _pack(commands)
        except BaseException:  # nothing sent: the connection goes back as it was
            self.release()
            raise
        self.count = len(commands)  # counted before the send: a reply may be due from here on
        try:
            self.conn.send_packed_command(packed)  # type: ignore[no-untyped-call]
        except (redis.RedisError, OSError):
            self.drop()
            return False
        return True

    def send_more(self, commands: list[tuple[Any, ...]]) -> bool:
        """``commands`` on the held connection too, behind those sent and before any reply
        is read, so one wait reads every reply. False when they could not be sent: the
        connection is then dropped, and every reply due is the error that lost it; or
        when they cannot be packed: nothing more is sent, and the replies due are read as
        before. No health check goes out first (its reply would be read in place of
        theirs)."""
        if self.done:
            return False
        try:
            packed = _pack(commands)
        except redis.DataError:
            return False
        self.count += len(commands)
        try:
            self.conn.send_packed_command(packed, check_health=False)  # type: ignore[no-untyped-call]
        except (redis.RedisError, OSError) as exc:
            lost = redis.ConnectionError(f"the connection was lost while sending: {exc}")
            due = self.count
            self.drop()
            self._got = [lost] * due
            return False
        return True

    def release(self) -> None:
        """Give the connection back with nothing sent on it."""
        if not self.done:
            self.done = True
            self.pool.release(self.conn)

    def drop(self) -> None:
        """Give the connection back disconnected, whatever was sent on it: no reply is
        read from it. Nothing is due any more."""
        if not self.done:
            self.conn.disconnect()  # type: ignore[no-untyped-call]
            self.count = 0
            self.release()

    def reply(self) -> Any:
        """The reply of the one command sent (see :meth:`replies`); a lost connection
        raises."""
        got = self.replies()[0]
        if isinstance(got, redis.ConnectionError | redis.TimeoutError | OSError):
            raise got
        return got

    def replies(self) -> list[Any]:
        """Every reply, in order: a ``redis.ResponseError`` stands in the list rather than
        being raised, and so does the error that lost the connection, for the reply it
        lost and every one after it (each read before it is kept). Read once, and kept: a
        later call returns them again (in a new list), so a caller may read them early
        (while another round trip is under way) and use them later. The connection goes
        back to its pool (disconnected when lost) either way. In a forked child the
        parent's replies are not ours to read: each is ``redis.ConnectionError``."""
        if self._got is not None:
            return list(self._got)
        if self.done:
            raise RuntimeError("these replies were given up unread")
        self.done = True
        if self.pid != os.getpid():
            self._got = [
                redis.ConnectionError("a reply sent before fork is not this process's")
            ] * self.count
            return list(self._got)
        out: list[Any] = []
        try:
            while len(out) < self.count:
                try:
                    out.append(self.conn.read_response())
                except redis.ResponseError as exc:
                    out.append(exc)
        except (redis.RedisError, OSError) as exc:
            self.conn.disconnect()  # type: ignore[no-untyped-call]
            out += [exc] * (self.count - len(out))
        except BaseException:  # interrupted: what was not read is as good as lost
            self.conn.disconnect()  # type: ignore[no-untyped-call]
            lost = redis.ConnectionError("the reply was not read: interrupted")
            self._got = out + [lost] * (self.count - len(out))
            raise
        finally:
            self.pool.release(self.conn)
        self._got = out
        return list(out)
