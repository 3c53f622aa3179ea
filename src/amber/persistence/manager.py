"""``PersistenceManager``: sessions, task queues and review queues in Redis (async).

Each write that checks something first (a version, that a session exists) is one
Lua script from ``amber.persistence.scripts``, so no other client can act in
between. Documents are JSON (``amber.persistence.models``); keys come from
``amber.keys.Keys``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript

from amber import defaults
from amber.config import load_settings
from amber.engines.connect import redact
from amber.engines.embedded import ensure_embedded
from amber.errors import (
    AmberError,
    ConfigError,
    RedisConnectionError,
    SessionNotFoundError,
    ValidationError,
    VersionConflictError,
)
from amber.keys import Keys, check_id
from amber.persistence import scripts
from amber.persistence.models import ReviewItem, Session, Task, dump, load, parse
from amber.redis_url import parse_redis_url

Document = Mapping[str, Any]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ttl_ms(seconds: object, name: str) -> int:
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


def _limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValidationError("limit must be 0 (all) or a positive integer", field="limit")
    return min(limit, defaults.BIGINT_MAX)


def _client(url: str, connect_timeout: float, command_timeout: float) -> aioredis.Redis:
    """An asyncio client for one server or a Sentinel-managed primary.

    Redis Cluster is refused: the session index and review queue are single keys
    that the scripts update together with documents in other slots.
    """
    target = parse_redis_url(url)
    common: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": command_timeout,
        "retry": Retry(NoBackoff(), 1),
    }
    if target.kind == "cluster":
        raise ValueError(
            "the persistence module (sessions, tasks, reviews) runs on one Redis server or a"
            " Sentinel-managed primary, not on Redis Cluster; see docs/cluster.md"
        )
    if target.kind == "sentinel":
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(target.nodes),
            sentinel_kwargs={"socket_connect_timeout": connect_timeout},
            ssl=target.tls,
        )
        return cast(
            aioredis.Redis,
            sentinel.master_for(
                target.service,
                db=target.db,
                username=target.username,
                password=target.password,
                **common,
            ),
        )
    return aioredis.Redis.from_url(url, **common)


class PersistenceManager:
    """Sessions, tasks and reviews of agents in one Redis, under one key prefix.

    Give ``redis_url`` or an open ``redis.asyncio`` ``client`` (which is then
    left open by ``close()``); with neither, ``AMBER_REDIS_URL`` is used, else
    amber's embedded Redis under ``data_dir``. ``prefix`` defaults to
    ``AMBER_PREFIX`` (``amber``); ``session_ttl`` and ``task_ttl`` are seconds.
    ``timeout`` bounds every connect and reply; by default a connect is bounded by
    ``AMBER_CONNECT_TIMEOUT`` and a reply by ``AMBER_COMMAND_TIMEOUT``.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        client: aioredis.Redis | None = None,
        prefix: str | None = None,
        session_ttl: float = defaults.SESSION_TTL,
        task_ttl: float = defaults.TASK_TTL,
        timeout: float | None = None,
        data_dir: str | Path | None = None,
    ) -> None:
        if redis_url is not None and client is not None:
            raise ValidationError("give redis_url or client, not both", field="client")
        try:
            settings = load_settings(
                redis_url=redis_url or None,
                prefix=prefix,
                connect_timeout=timeout,
                command_timeout=timeout,
                data_dir=data_dir,
            )
        except ConfigError as exc:
            if "setting" not in exc.context:
                raise  # an unknown AMBER_* variable: the environment, not an argument
            field = str(exc.context["setting"])
            raise ValidationError(exc.message, field=field) from None
        self.keys = Keys(settings.prefix)
        self.session_ttl_ms = _ttl_ms(session_ttl, "session_ttl")
        self.task_ttl_ms = _ttl_ms(task_ttl, "task_ttl")
        self._owns_client = client is None
        if client is None:
            url = settings.redis_url
            if not url:
                url = ensure_embedded(settings.data_dir, redis=True, postgres=False)["redis"]
            self.url = redact(url)
            try:
                client = _client(url, settings.connect_timeout, settings.command_timeout)
            except ValueError as exc:
                raise ValidationError(
                    f"redis_url is not a usable Redis URL: {exc}", field="redis_url", url=self.url
                ) from None
        else:
            self.url = "(client)"
        self.redis: aioredis.Redis = client
        register = self.redis.register_script
        self._save_session = register(scripts.SAVE_SESSION)
        self._save_task = register(scripts.SAVE_TASK)
        self._next_task = register(scripts.NEXT_TASK)
        self._delete_session = register(scripts.DELETE_SESSION)
        self._save_review = register(scripts.SAVE_REVIEW)
        self._list_indexed = register(scripts.LIST_INDEXED)

    # -- plumbing ---------------------------------------------------------------------
    @contextmanager
    def _reachable(self) -> Iterator[None]:
        """Turn a refused, dropped or timed-out connection into ``RedisConnectionError``,
        and a command Redis refused (e.g. a key of another type) into ``AmberError``."""
        try:
            yield
        except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
            raise RedisConnectionError(
                f"Redis did not answer: {type(exc).__name__}: {exc}", url=self.url
            ) from None
        except rex.ResponseError as exc:
            raise AmberError(f"Redis refused the command: {exc}", url=self.url) from None

    async def _run(self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        with self._reachable():
            return await script(keys=list(keys), args=list(args))

    async def _get(self, key: str) -> bytes | str | None:
        with self._reachable():
            return await self.redis.get(key)

    async def close(self) -> None:
        """Close the connection pool (a client passed in is left open)."""
        if self._owns_client:
            await self.redis.aclose()

    async def __aenter__(self) -> PersistenceManager:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- sessions ---------------------------------------------------------------------
    async def save_session(self, session: Session | Document) -> Session:
        """Store ``session`` if the stored version equals its ``version`` (or it is new).

        Returns the session as stored, with ``version + 1``; raises
        ``VersionConflictError`` (with ``expected`` and ``actual``) when another
        writer got there first. Renews the session's TTL.
        """
        stored = parse(Session, session)  # a fresh copy: the caller's object is left alone
        expected = stored.version
        stored.version = expected + 1
        sid = stored.session_id
        ok, version = await self._run(
            self._save_session,
            [self.keys.session(sid), self.keys.session_index()],
            [expected, dump(stored), self.session_ttl_ms, sid],
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

    async def get_session(self, session_id: str) -> Session | None:
        """The stored session, or None if it does not exist or has expired."""
        raw = await self._get(self.keys.session(session_id))
        return None if raw is None else load(Session, raw)

    async def list_sessions(self, limit: int = 0) -> list[Session]:
        """Live sessions, most recently saved first (``limit`` 0: all)."""
        raw = await self._list(self.keys.session_index(), self.keys.session_base(), limit, True)
        return [load(Session, r) for r in raw]

    async def delete_session(self, session_id: str) -> int:
        """Delete a session, its queue and every task saved into it; returns tasks deleted.

        Raises ``SessionNotFoundError`` if nothing of the session exists.
        """
        deleted = await self._run(
            self._delete_session,
            [
                self.keys.session(session_id),
                self.keys.task_queue(session_id),
                self.keys.session_tasks(session_id),
                self.keys.session_index(),
            ],
            [self.keys.task_base(), session_id],
        )
        if deleted < 0:
            raise SessionNotFoundError("no such session", session_id=session_id)
        return int(deleted)

    # -- tasks --------------------------------------------------------------------------
    async def save_task(self, task: Task | Document, session_id: str | None = None) -> Task:
        """Store ``task`` and queue it in its session; returns the task as stored.

        The session is ``session_id``, else the task's own ``session_id`` field; it
        must exist (``SessionNotFoundError``). Saving a task id again updates the
        task in place without queueing it twice.
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
        code, *rest = await self._run(
            self._save_task,
            [
                self.keys.session(sid),
                self.keys.task(stored.id),
                self.keys.task_queue(sid),
                self.keys.session_tasks(sid),
            ],
            [dump(stored), self.task_ttl_ms, stored.id, sid],
        )
        if code == -1:
            raise SessionNotFoundError("cannot queue a task in a missing session", session_id=sid)
        if code == -2:
            raise ValidationError(
                f"invalid task: id: task {stored.id!r} already belongs to session "
                f"{_text(rest[0])!r}",
                field="id",
                task_id=stored.id,
                session_id=sid,
            )
        return stored

    async def get_task(self, task_id: str) -> Task | None:
        """The stored task, or None if it does not exist or has expired."""
        raw = await self._get(self.keys.task(task_id))
        return None if raw is None else load(Task, raw)

    async def next_task(self, session_id: str) -> Task | None:
        """Take the oldest queued task of a session (FIFO), or None if none is left.

        Queue entries whose task has expired are dropped on the way. The task
        document stays readable with ``get_task`` until its TTL. Raises
        ``SessionNotFoundError`` if the session does not exist.
        """
        code, *rest = await self._run(
            self._next_task,
            [
                self.keys.session(session_id),
                self.keys.task_queue(session_id),
                self.keys.session_tasks(session_id),
            ],
            [self.keys.task_base()],
        )
        if code == -1:
            raise SessionNotFoundError("no such session", session_id=session_id)
        return load(Task, rest[0]) if code == 1 else None

    async def list_tasks(self, session_id: str) -> list[Task]:
        """The tasks still queued in a session, in the order ``next_task`` gives them."""
        with self._reachable():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.exists(self.keys.session(session_id))
                pipe.lrange(self.keys.task_queue(session_id), 0, -1)
                exists, ids = await pipe.execute()
            if not exists:
                raise SessionNotFoundError("no such session", session_id=session_id)
            if not ids:
                return []
            bodies = await self.redis.mget([self.keys.task(_text(i)) for i in reversed(ids)])
        return [load(Task, b) for b in bodies if b is not None]

    # -- reviews ------------------------------------------------------------------------
    async def save_review(self, review: ReviewItem | Document) -> ReviewItem:
        """Store a review until its ``expires_at`` and queue it; returns it as stored.

        A review whose ``expires_at`` has already passed is refused
        (``ValidationError`` naming ``expires_at``).
        """
        checked = parse(ReviewItem, review)
        if checked.expired():
            raise ValidationError(
                f"invalid review: expires_at: {checked.expires_at.isoformat()} has passed",
                field="expires_at",
                review_id=checked.review_id,
            )
        await self._run(
            self._save_review,
            [self.keys.review(checked.review_id), self.keys.review_queue()],
            [dump(checked), checked.expires_at_ms(), checked.review_id],
        )
        return checked

    async def get_review(self, review_id: str) -> ReviewItem | None:
        """The stored review, or None if it does not exist or its ``expires_at`` has passed."""
        raw = await self._get(self.keys.review(review_id))
        if raw is None:
            return None
        review = load(ReviewItem, raw)
        return None if review.expired() else review

    async def list_reviews(self, limit: int = 0) -> list[ReviewItem]:
        """Pending reviews, soonest ``expires_at`` first (``limit`` 0: all).

        Entries that have expired or were removed are dropped from the queue.
        """
        raw = await self._list(self.keys.review_queue(), self.keys.review_base(), limit, False)
        reviews = [load(ReviewItem, r) for r in raw]
        return [r for r in reviews if not r.expired()]

    async def remove_review(self, review_id: str) -> bool:
        """Remove a review and its queue entry; False if there was none."""
        with self._reachable():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(self.keys.review(review_id))
                pipe.zrem(self.keys.review_queue(), review_id)
                deleted, unqueued = await pipe.execute()
        return bool(deleted or unqueued)

    async def _list(self, index: str, base: str, limit: int, latest_first: bool) -> list[Any]:
        count = _limit(limit)
        order = "1" if latest_first else "0"
        return cast(list[Any], await self._run(self._list_indexed, [index], [base, count, order]))
