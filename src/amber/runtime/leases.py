"""Leases: which run owns an analysis, for how long, renewed by one heartbeat per process.

A lease is three columns of the analysis's row (``schema/sql.py``): the owner run
(``host:pid:token``), the owner process's liveness key and when it lapses. A process
that holds leases holds one advisory lock of its own, on a connection of its own, for
its life (``Liveness``): when it dies PostgreSQL frees the lock, and its leases are
claimable at once rather than when they expire. No connection is held per lease or per
run; the pool's connections are taken per statement.

A run whose lease could not be renewed in time, or was taken over, learns so from
``lost`` and stops at its next step; a write it still attempts is refused by the
checkpoint insert's fence (the lease owner is checked in the same statement).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

import psycopg
from psycopg_pool import ConnectionPool

from amber.errors import StoreUnavailable
from amber.schema import sql

log = logging.getLogger("amber.leases")

GIVEN_BACK_REMEMBERED = 10_000
"""Owners a process remembers as given back, before it starts over (each is a run)."""

LIVENESS_ATTEMPTS = 3
"""Tries at holding the liveness lock before a claim gives up with ``StoreUnavailable``."""


IDLE_TIMEOUT_SINCE = 140000
"""The PostgreSQL version (``server_version_num``) that has ``idle_session_timeout``."""


def clock() -> float:
    """Seconds on a clock that never goes back and, unlike ``time.monotonic`` on Linux,
    keeps counting while the machine is suspended: a lease renewed before a laptop's lid
    closed is stale when it opens (``CLOCK_BOOTTIME`` where there is one)."""
    return time.clock_gettime(_CLOCK)


_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


@dataclass(frozen=True)
class Claim:
    """A lease just taken: the analysis, the run that owns it, and the owner before."""

    analysis_id: str
    owner: str
    prior: str | None
    status: str = "running"
    row: tuple[Any, ...] | None = None
    """The analysis row as the claim found it (``sql.ANALYSIS_COLUMNS``), if it read it."""
    heads: dict[str, int] | None = None
    """Each agent type's newest checkpoint sequence, if the claim read them."""
    noted: bool = False
    """Whether the claim wrote its ``claimed`` / ``taken_over`` event itself."""
    stuck: bool = False
    """The run taken over from was alive but had not renewed its lease for the stuck
    bound (a step that never returns, a frozen process)."""
    token: int = 0
    """The run's fencing token: higher than every earlier claim's; every working-memory
    write of the run carries it, and Redis refuses it once a later run fenced the agent."""

    @property
    def taken_over(self) -> bool:
        """The analysis was leased by a run that died or let its lease lapse."""
        return self.prior is not None


class Liveness:
    """This process's liveness lock: a connection of its own holding one advisory lock."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.key = secrets.randbelow(2**31 - 2) + 1
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def ensure(self, ping: bool = False) -> int:
        """Hold the lock (reconnecting after a lost connection); returns its key.

        With ``ping`` the connection is checked with a round trip first."""
        with self._lock:
            if self._conn is not None and not self._conn.closed and self._alive(ping):
                return self.key
            self._close()
            try:
                kwargs: dict[str, Any] = dict(cast(dict[str, Any], self.pool.kwargs))
                kwargs["autocommit"] = True
                self._conn = psycopg.connect(str(self.pool.conninfo), **kwargs)
                if self._conn.info.server_version >= IDLE_TIMEOUT_SINCE:
                    # idle by design: a server's idle_session_timeout would end the session,
                    # and with it the lock, while this process runs (its runs claimable)
                    self._conn.execute("SET idle_session_timeout = 0")
                row = self._conn.execute(
                    sql.LIVENESS_LOCK, (sql.LIVENESS_SPACE, self.key)
                ).fetchone()
            except psycopg.Error as exc:
                self._close()
                raise StoreUnavailable(f"PostgreSQL liveness lock: {exc}".strip()) from None
            if not (row and row[0]):  # another live process drew the same key
                self._close()
                self.key = secrets.randbelow(2**31 - 2) + 1
                raise StoreUnavailable("liveness key in use; retry", key=self.key)
            return self.key

    def held(self, ping: bool = False) -> tuple[int, int]:
        """(key, backend pid) of the connection holding the lock, reconnecting first if it
        is closed (or, with ``ping``, does not answer)."""
        key = self.ensure(ping)
        with self._lock:
            conn = self._conn
            if conn is None or conn.closed:
                raise StoreUnavailable("PostgreSQL liveness connection was lost; retry")
            return key, conn.info.backend_pid

    def _alive(self, ping: bool) -> bool:
        assert self._conn is not None
        if not ping:
            return True
        try:
            self._conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        """Give the lock up (this process's leases become claimable)."""
        with self._lock:
            self._close()


class Leases:
    """Claims, renews and releases analysis leases for one process."""

    def __init__(
        self, pool: ConnectionPool, lease_seconds: float, stuck_seconds: float | None = None
    ) -> None:
        self.pg = pool
        self.lease_seconds = lease_seconds
        """How long a run may go unrenewed before it stops itself at its next step."""
        self.stuck_seconds = max(stuck_seconds or lease_seconds, lease_seconds)
        """How long the row says the lease lasts: while the owner's process is alive (its
        liveness lock held) nobody takes the analysis over before then, however busy the
        owner's interpreter is; a dead owner's leases lapse at once."""
        self.liveness = Liveness(pool)
        self._held: dict[str, float] = {}
        """Each held lease's owner, and when (by ``clock``) it was last known renewed."""
        self.lost: set[str] = set()
        """Owners whose lease this process failed to renew or found taken over."""
        self.statuses: dict[str, str] = {}
        """Each held lease's analysis status, as of the last heartbeat."""
        self._given_back: set[str] = set()
        """Owners whose lease the statement ending their run gave back (see ``release``)."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._beat: threading.Thread | None = None
        self._closed = False

    # -- claiming -------------------------------------------------------------------------
    def claim(self, analysis_id: str, owner: str) -> Claim | None:
        """Lease one analysis for ``owner``, or None when a live run holds it."""
        key = self._key()
        params = {
            "owner": owner,
            "key": key,
            "lease": self.stuck_seconds,
            "aid": analysis_id,
            "space": sql.LIVENESS_SPACE,
        }
        sent = clock()
        with self.pg.connection() as conn:
            row = conn.execute(sql.CLAIM, params).fetchone()
        if row is None:
            return None
        self._hold(owner, sent)
        prior = row[1] if row[1] and row[1] != owner else None
        return Claim(analysis_id, owner, prior, str(row[0]), token=int(row[2]))

    def claim_next(
        self, owner: str, n: int, known: list[str], skip: list[str] | None = None
    ) -> list[Claim]:
        """Lease up to ``n`` queued analyses whose agent types are all in ``known``, but
        none in ``skip``."""
        if n <= 0:
            return []
        params: dict[str, Any] = {
            "owner": owner,
            "lease": self.stuck_seconds,
            "n": n,
            "known": known,
            "skip": skip or [],
            "space": sql.LIVENESS_SPACE,
        }
        # the statement itself checks that the liveness lock is held, so a claim costs no
        # round trip of its own to the liveness connection; only when it is not held is
        # that connection checked, and made again if it was lost
        for attempt in range(LIVENESS_ATTEMPTS):
            params["key"], params["pid"] = self._held_lock(ping=attempt > 0)
            sent = clock()
            with self.pg.connection() as conn:
                rows = conn.execute(sql.CLAIM_NEXT, params).fetchall()
            if rows and rows[0][0]:
                break
        else:
            raise StoreUnavailable("PostgreSQL does not show this process's liveness lock held")
        claims = [
            Claim(
                str(r[1]),
                str(r[2]),
                r[3],
                row=tuple(r[7:]),
                heads=dict(r[4] or {}),
                noted=True,
                token=int(r[5]),
                stuck=bool(r[6]),
            )
            for r in rows
            if r[1] is not None
        ]
        for c in claims:
            self._hold(c.owner, sent)
        return claims

    def release(self, analysis_id: str, owner: str) -> None:
        """Give the lease back (a no-op if it is no longer ours)."""
        with self._lock:
            self._drop(owner)
            if owner in self._given_back:  # the statement that ended the run did it
                self._given_back.discard(owner)
                return
        with self.pg.connection() as conn:
            conn.execute(sql.RELEASE, (analysis_id, owner))

    def given_back(self, owner: str) -> None:
        """The run's lease was given back by the statement that ended it: stop renewing
        it, and let :meth:`release` skip its own statement."""
        with self._lock:
            self._drop(owner)
            if len(self._given_back) >= GIVEN_BACK_REMEMBERED:
                self._given_back.clear()
            self._given_back.add(owner)

    def _drop(self, owner: str) -> None:
        self._held.pop(owner, None)
        self.lost.discard(owner)
        self.statuses.pop(owner, None)

    def holder(self, analysis_id: str) -> str | None:
        """The run holding a live lease on the analysis, if any."""
        with self.pg.connection() as conn:
            row = conn.execute(
                sql.LEASE_HELD, {"aid": analysis_id, "space": sql.LIVENESS_SPACE}
            ).fetchone()
        return str(row[0]) if row else None

    def _key(self) -> int:
        # checked with a round trip: after a PostgreSQL restart the connection looks open
        # but its lock is gone, and a lease naming it would be claimable by anyone
        return self._held_lock(ping=True)[0]

    def _held_lock(self, ping: bool) -> tuple[int, int]:
        for _ in range(LIVENESS_ATTEMPTS - 1):
            try:
                return self.liveness.held(ping)
            except StoreUnavailable as exc:  # another process drew the same key: redraw
                if "key" not in exc.context:
                    raise
        return self.liveness.held(ping)

    # -- the heartbeat --------------------------------------------------------------------
    def _hold(self, owner: str, sent: float) -> None:
        """Renew ``owner``'s lease from now on. It counts from ``sent``, when the claim
        went out, not from its reply: a process frozen in between (its claim renewed the
        lease, which then lapsed) finds the lease stale at its first step, and asks."""
        with self._lock:
            self._held[owner] = sent
            self.lost.discard(owner)
            if self._beat is None or not self._beat.is_alive():
                self._beat = threading.Thread(target=self._run, name="amber-heartbeat", daemon=True)
                self._beat.start()

    def _run(self) -> None:
        interval = max(self.lease_seconds / 3, 0.05)
        while not self._closed:
            self._wake.wait(interval)
            self._wake.clear()
            if self._closed:
                return
            try:
                self.renew()
            except Exception as exc:  # PostgreSQL away: leases lapse; runs stop at a step
                log.warning("lease heartbeat failed: %s", exc)

    def renew(self) -> None:
        """Extend every held lease now; a lease not extended is recorded in ``lost``."""
        with self._lock:
            owners = sorted(self._held)
        if not owners:
            return
        started = clock()
        key = self.liveness.ensure(ping=True)  # a dropped liveness connection is re-made
        params = {
            "lease": self.stuck_seconds,
            "owners": owners,
            "key": key,
            "space": sql.LIVENESS_SPACE,
        }
        with self.pg.connection() as conn:
            rows = conn.execute(sql.RENEW, params).fetchall()
        renewed = {str(r[0]): str(r[1]) for r in rows}
        with self._lock:
            for owner in owners:
                if owner not in self._held:
                    continue
                if owner in renewed:
                    self.statuses[owner] = renewed[owner]
                    self._held[owner] = started
                else:
                    self.lost.add(owner)

    def is_lost(self, owner: str) -> bool:
        """Whether the run's lease was found lost, or not renewed for a lease length.

        A lease merely stale (the heartbeat could not run: a long call holding the GIL, a
        frozen process) is renewed here first: it is lost only if PostgreSQL no longer
        names this run its owner, or cannot be asked."""
        with self._lock:
            if owner in self.lost:
                return True
        if not self._stale(owner):
            return False
        try:
            self.renew()
        except Exception as exc:  # PostgreSQL away: the lease may be anyone's now
            log.warning("lease of %s could not be renewed: %s", owner, exc)
            return True
        return self._stale(owner) or owner in self.lost

    def _stale(self, owner: str) -> bool:
        with self._lock:
            renewed = self._held.get(owner)
            return owner in self.lost or (
                renewed is not None and clock() - renewed > self.lease_seconds
            )

    def close(self) -> None:
        """Stop the heartbeat and give up the liveness lock (held leases lapse)."""
        self._closed = True
        self._wake.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=5)
        self.liveness.close()


def wait_for(claim: Any, wait: float) -> Any:
    """Call ``claim()`` until it returns something or ``wait`` seconds have passed."""
    deadline = time.monotonic() + wait
    while True:
        got = claim()
        if got is not None or time.monotonic() >= deadline:
            return got
        time.sleep(0.05)
