"""Sessions, task queues and review queues of agents in Redis, with optimistic concurrency.

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
