"""What ``PersistenceManager`` and ``SyncPersistenceManager`` share: their construction.

Settings, keys and TTLs are resolved once here; the two differ only in the client
they open (``redis.asyncio`` or ``redis``) and in awaiting its replies.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import redis
import redis.asyncio as aioredis

from amber import defaults
from amber.config import load_settings
from amber.engines.connect import Flavor, redact, redis_client
from amber.engines.embedded import ensure_embedded
from amber.errors import ConfigError, ValidationError
from amber.keys import Keys
from amber.persistence import scripts
from amber.persistence.core import Core, check_limit, ttl_ms
from amber.persistence.models import ReviewItem
from amber.persistence.reviews import TaskReviews

C = TypeVar("C", redis.Redis, aioredis.Redis)
"""The client of one flavor; on a cluster it is the flavor's ``RedisCluster``, typed as the
flavor's ``Redis`` (the persistence module calls only what both offer)."""


class Shell(Generic[C]):
    """Sessions, tasks and reviews of agents in one Redis (a server, a cluster or a
    Sentinel-managed primary), under one key prefix.

    Give ``redis_url`` or an open ``client`` (which is then left open by
    ``close()``); with neither, ``AMBER_REDIS_URL`` is used, else amber's embedded
    Redis under ``data_dir``. ``prefix`` defaults to ``AMBER_PREFIX`` (``amber``);
    ``session_ttl`` and ``task_ttl`` are seconds. ``timeout`` bounds every connect
    and reply; by default a connect is bounded by ``AMBER_CONNECT_TIMEOUT`` and a
    reply by ``AMBER_COMMAND_TIMEOUT``.
    """

    flavor: ClassVar[Flavor]

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        client: C | None = None,
        prefix: str | None = None,
        session_ttl: float = defaults.SESSION_TTL,
        task_ttl: float = defaults.TASK_TTL,
        timeout: float | None = None,
        data_dir: str | Path | None = None,
        database_url: str | None = None,
    ) -> None:
        if redis_url is not None and client is not None:
            raise ValidationError("give redis_url or client, not both", field="client")
        try:
            settings = load_settings(
                redis_url=redis_url or None,
                database_url=database_url or None,
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
        keys = Keys(settings.prefix)
        session_ttl_ms = ttl_ms(session_ttl, "session_ttl")
        task_ttl_ms = ttl_ms(task_ttl, "task_ttl")
        self._owns_client = client is None
        if client is None:
            url = settings.redis_url
            if not url:
                url = ensure_embedded(settings.data_dir, redis=True, postgres=False)["redis"]
            self.url = redact(url)
            try:
                client = redis_client(
                    self.flavor, url, settings.connect_timeout, settings.command_timeout, 1
                )
            except ValueError as exc:
                raise ValidationError(
                    f"redis_url is not a usable Redis URL: {exc}", field="redis_url", url=self.url
                ) from None
        else:
            self.url = "(client)"
        self.redis: C = client
        cluster = isinstance(client, self.flavor.cluster)
        self.core = Core(keys, session_ttl_ms, task_ttl_ms, cluster=cluster)
        self.keys = keys
        self._scripts: dict[str, Any] = {
            name: self.flavor.script(client, lua) for name, lua in scripts.SCRIPTS.items()
        }
        self.reviews = TaskReviews(
            keys.prefix,
            settings.database_url or None,
            settings.data_dir,
            settings.connect_timeout,
            settings.command_timeout,
        )
        """The module's reviews: amber's reviews in PostgreSQL, under this prefix."""

    # -- reviews: amber's one review queue, blocking (the asyncio shell runs them in a thread)
    def _save_review(self, review: ReviewItem | Mapping[str, Any]) -> ReviewItem:
        """Store a review until its ``expires_at``; returns it as stored.

        A pending review (no ``decision``) is queued: it shows in ``amber reviews
        list``, ``/api/reviews`` and the dashboard beside the reviews analyses wait for.
        Saving a review again replaces it. A review whose ``expires_at`` has passed is
        refused (``ValidationError``).
        """
        return self.reviews.save(review)

    def _get_review(self, review_id: str) -> ReviewItem | None:
        """The stored review, decided or not, or None if it does not exist or its
        ``expires_at`` has passed."""
        return self.reviews.get(review_id)

    def _list_reviews(self, limit: int = 0) -> list[ReviewItem]:
        """Pending reviews of this prefix, soonest ``expires_at`` first (``limit`` 0: all)."""
        return self.reviews.list(check_limit(limit))

    def _remove_review(self, review_id: str) -> bool:
        """Remove a review; False if there was none."""
        return self.reviews.remove(review_id)

    def _decide(
        self, review_id: str, decision: str, by: str, comment: str | None = None
    ) -> ReviewItem:
        """Record ``decision`` (``approved`` or ``rejected``) by ``by`` on a review, once.

        Returns the decided review, which leaves the pending queue and stays readable
        with ``get_review`` until its ``expires_at``. Raises ``ReviewNotFound`` if the
        review does not exist or has expired, ``ReviewAlreadyDecided`` (with the
        stored ``decision`` and ``decided_by``) if it was decided before: the first
        decision stands, here or in ``amber reviews approve``.
        """
        return self.reviews.decide(review_id, decision, by, comment)
