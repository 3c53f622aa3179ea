"""Sessions and task queues of agents in Redis, with optimistic concurrency, and their reviews.

Reviews are amber's one review queue in PostgreSQL (the database of ``AMBER_DATABASE_URL``
or ``database_url``, else the embedded one), so they show in ``amber reviews list``, the
API and the dashboard beside the reviews analyses wait for.

from amber.persistence import PersistenceManager, SyncPersistenceManager
async with PersistenceManager(redis_url="redis://localhost:6379/0") as pm:
    stored = await pm.save_session({"session_id": "s1", "goal": "...", "status": "planning"})
with SyncPersistenceManager(redis_url="redis://localhost:6379/0") as pm:
    stored = pm.save_session({"session_id": "s2", "goal": "...", "status": "planning"})
"""

from amber.errors import (
    RedisConnectionError,
    ReviewAlreadyDecided,
    ReviewNotFound,
    SessionNotFoundError,
    ValidationError,
    VersionConflictError,
)
from amber.persistence.manager import PersistenceManager
from amber.persistence.models import ReviewItem, Session, Task
from amber.persistence.sync import SyncPersistenceManager

__all__ = [
    "PersistenceManager",
    "RedisConnectionError",
    "ReviewAlreadyDecided",
    "ReviewItem",
    "ReviewNotFound",
    "Session",
    "SessionNotFoundError",
    "SyncPersistenceManager",
    "Task",
    "ValidationError",
    "VersionConflictError",
]
