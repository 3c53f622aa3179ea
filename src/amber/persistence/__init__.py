"""Sessions, task queues and review queues of agents in Redis, with optimistic concurrency.

from amber.persistence import PersistenceManager
async with PersistenceManager(redis_url="redis://localhost:6379/0") as pm:
    stored = await pm.save_session({"session_id": "s1", "goal": "...", "status": "planning"})
"""

from amber.errors import (
    RedisConnectionError,
    SessionNotFoundError,
    ValidationError,
    VersionConflictError,
)
from amber.persistence.manager import PersistenceManager
from amber.persistence.models import ReviewItem, Session, Task

__all__ = [
    "PersistenceManager",
    "RedisConnectionError",
    "ReviewItem",
    "Session",
    "SessionNotFoundError",
    "Task",
    "ValidationError",
    "VersionConflictError",
]
