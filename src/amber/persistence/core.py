"""Every operation of the persistence module, once, without I/O.

Each method of ``Core`` is a ``Plan`` (``amber.persistence.calls``): it checks its
arguments, yields the Redis calls it needs (the keys from ``amber.keys.Keys``, the
scripts from ``amber.persistence.scripts``), reads their replies and returns the
result or raises amber's error. ``PersistenceManager`` and ``SyncPersistenceManager``
run these plans; the contract of each method is documented here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amber import defaults
from amber.errors import (
    SessionNotFoundError,
    ValidationError,
    VersionConflictError,
)
from amber.keys import Keys, check_id
from amber.persistence.calls import Get, MGet, Plan, Run, Score
from amber.persistence.models import Session, Task, dump, load, parse

Document = Mapping[str, Any]


def text(value: bytes | str) -> str:
    """A reply as ``str``, whether the client decodes replies or not."""
    return value.decode() if isinstance(value, bytes) else value


def ttl_ms(seconds: object, name: str) -> int:
    """A TTL in seconds as milliseconds; ``ValidationError`` naming ``name`` if unusable."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= defaults.TTL_MAX  # NaN and infinity fail here
    ):
        raise ValidationError(
            f"{name} must be a number of seconds above 0 and at most {defaults.TTL_MAX}",
            field=name,
        )
    return max(1, round(seconds * 1000))


def check_limit(limit: object) -> int:
    """A listing's ``limit`` checked: 0 (all) or a positive integer."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValidationError("limit must be 0 (all) or a positive integer", field="limit")
    return min(limit, defaults.BIGINT_MAX)


LOOKUP_GRACE_MS = 1000
"""How much longer a task's lookup lives than the task: it is written first, so it never
expires before the task does."""

PAGE = 500
"""Documents read per round trip when listing."""


class Core:
    """Sessions and tasks under one key prefix, as plans of Redis calls."""

    def __init__(
        self, keys: Keys, session_ttl_ms: int, task_ttl_ms: int, *, cluster: bool = False
    ) -> None:
        self.keys = keys
        self.session_ttl_ms = session_ttl_ms
        self.task_ttl_ms = task_ttl_ms
        self.cluster = cluster
        """Whether keys of different slots are on different servers (Redis Cluster)."""

    def _session_keys(self, session_id: str) -> list[str]:
        """The keys a session's task scripts take, all in the session's slot."""
        k = self.keys
        return [
            k.session(session_id),
            k.tasks(session_id),
            k.task_expiry(session_id),
            k.task_queue(session_id),
        ]

    # -- sessions ---------------------------------------------------------------------
    def save_session(self, session: Session | Document) -> Plan[Session]:
        """Store ``session`` if the stored version equals its ``version`` (or it is new).

        Returns the session as stored, with ``version + 1``; raises
        ``VersionConflictError`` (with ``expected`` and ``actual``) when another
        writer got there first. Renews the session's TTL.
        """
        stored = parse(Session, session)  # a fresh copy: the caller's object is left alone
        expected = stored.version
        stored.version = expected + 1
        sid = stored.session_id
        key, index, ttl = self.keys.session(sid), self.keys.session_index(), self.session_ttl_ms
        if self.cluster:  # the index entry first: a session is never stored without one
            yield Run("index_session", [index], [sid, ttl])
            ok, version = yield Run("save_session", [key], [expected, dump(stored), ttl])
        else:  # the same two steps, in one script on one server
            ok, version = yield Run(
                "save_session_indexed", [key, index], [expected, dump(stored), ttl, sid]
            )
        if not ok:
            raise VersionConflictError(
                f"session was saved by someone else: stored version is {version}, "
                f"this copy has {expected}; read it again and retry",
                session_id=sid,
                expected=expected,
                actual=int(version),
            )
        return stored

    def get_session(self, session_id: str) -> Plan[Session | None]:
        """The stored session, or None if it does not exist or has expired."""
        raw = yield Get(self.keys.session(session_id))
        return None if raw is None else load(Session, raw)

    def list_sessions(self, limit: int = 0) -> Plan[list[Session]]:
        """Live sessions, most recently saved first (``limit`` 0: all).

        Index entries whose session is gone are skipped; they leave the index when
        their score (the latest the session could expire) passes.
        """
        count = check_limit(limit)
        listed = yield Run("session_ids", [self.keys.session_index()], [])
        ids = [text(i) for i in listed]
        found: list[Session] = []
        for start in range(0, len(ids), PAGE):
            page = ids[start : start + PAGE]
            bodies = yield MGet([self.keys.session(sid) for sid in page])
            found += [load(Session, b) for b in bodies if b is not None]
            if count and len(found) >= count:
                return found[:count]
        return found

    def delete_session(self, session_id: str) -> Plan[int]:
        """Delete a session, its queue and every task saved into it; returns tasks deleted.

        Raises ``SessionNotFoundError`` if nothing of the session exists.
        """
        keys, index = self._session_keys(session_id), self.keys.session_index()
        score = yield Score(index, session_id)  # read first: a save from now on changes it
        code, *task_ids = yield Run("delete_session", keys, [])
        if code < 0:
            raise SessionNotFoundError("no such session", session_id=session_id)
        for task_id in task_ids:  # after the tasks: a lookup without its task reads as None
            yield Run("release_task", [self.keys.task_session(text(task_id))], [session_id])
        if score is not None:
            yield Run("unindex_session", [index], [session_id, int(score)])
        return int(code)

    # -- tasks --------------------------------------------------------------------------
    def save_task(self, task: Task | Document, session_id: str | None = None) -> Plan[Task]:
        """Store ``task`` and queue it in its session; returns the task as stored.

        The session is ``session_id``, else the task's own ``session_id`` field; it
        must exist (``SessionNotFoundError``). Saving a task id again updates the
        task in place without queueing it twice; a task id another session holds
        is refused (``ValidationError`` naming ``id``).
        """
        checked = parse(Task, task)
        sid = session_id if session_id is not None else checked.session_id
        if sid is None:
            raise ValidationError(
                "invalid task: session_id: give the session to queue the task in",
                field="session_id",
                task_id=checked.id,
            )
        check_id(sid, "session_id")
        if checked.session_id not in (None, sid):
            raise ValidationError(
                f"invalid task: session_id: the task names session {checked.session_id!r}, "
                f"the call {sid!r}",
                field="session_id",
                task_id=checked.id,
            )
        stored = checked.model_copy(update={"session_id": sid})
        lookup = self.keys.task_session(stored.id)
        lookup_ttl = self.task_ttl_ms + LOOKUP_GRACE_MS
        # the lookup first: a task is never there without one
        stale = ""
        while True:
            claimed, *owner = yield Run("claim_task", [lookup], [sid, lookup_ttl, stale])
            if claimed:
                break
            other = text(owner[0])
            held = yield Run("get_task", self._session_keys(other)[1:3], [stored.id])
            if held is not None:
                raise ValidationError(
                    f"invalid task: id: task {stored.id!r} already belongs to session {other!r}",
                    field="id",
                    task_id=stored.id,
                    session_id=sid,
                )
            stale = other  # that session no longer holds it: take the lookup over
        code = yield Run(
            "save_task",
            self._session_keys(sid),
            [dump(stored), self.task_ttl_ms, stored.id],
        )
        if code == -1:
            yield Run("release_task", [lookup], [sid])
            raise SessionNotFoundError("cannot queue a task in a missing session", session_id=sid)
        return stored

    def get_task(self, task_id: str) -> Plan[Task | None]:
        """The stored task, or None if it does not exist or has expired."""
        sid = yield Get(self.keys.task_session(task_id))
        if sid is None:
            return None
        raw = yield Run("get_task", self._session_keys(text(sid))[1:3], [task_id])
        return None if raw is None else load(Task, raw)

    def next_task(self, session_id: str) -> Plan[Task | None]:
        """Take the oldest queued task of a session (FIFO), or None if none is left.

        Queue entries whose task has expired are dropped on the way. The task
        document stays readable with ``get_task`` until its TTL. Raises
        ``SessionNotFoundError`` if the session does not exist.
        """
        code, *rest = yield Run("next_task", self._session_keys(session_id), [])
        if code == -1:
            raise SessionNotFoundError("no such session", session_id=session_id)
        return load(Task, rest[0]) if code == 1 else None

    def list_tasks(self, session_id: str) -> Plan[list[Task]]:
        """The tasks still queued in a session, in the order ``next_task`` gives them.

        Raises ``SessionNotFoundError`` if the session does not exist.
        """
        code, *bodies = yield Run("list_tasks", self._session_keys(session_id), [])
        if code == -1:
            raise SessionNotFoundError("no such session", session_id=session_id)
        return [load(Task, b) for b in bodies]
