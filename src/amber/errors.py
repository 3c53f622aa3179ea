"""amber's exceptions: one base, a few subclasses that carry the ids involved.

Every error amber raises on purpose is an ``AmberError``. Each takes a message
and keyword context (``agent_id=...``, ``analysis_id=...``, ``checkpoint_id=...``),
which is kept on ``.context`` and as attributes, shown in ``str()`` (long values
shortened), and survives pickling across processes.
"""

from __future__ import annotations

from typing import Any

_HEAD, _TAIL = 150, 80
"""A context value's ``repr`` longer than both is shown as its start … its end."""


def _short(value: Any) -> str:
    text = repr(value)
    if len(text) <= _HEAD + _TAIL:
        return text
    return f"{text[:_HEAD]}…{text[-_TAIL:]} ({len(text)} chars)"


def _rebuild(cls: type[AmberError], message: str, context: dict[str, Any]) -> AmberError:
    return cls(message, **context)


class AmberError(Exception):
    """Base of every error amber raises on purpose."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        for name, value in context.items():
            setattr(self, name, value)

    def __str__(self) -> str:
        if not self.context:
            return self.message
        ids = ", ".join(f"{k}={_short(v)}" for k, v in self.context.items())
        return f"{self.message} ({ids})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.context))


class ConfigError(AmberError):
    """A setting is missing or malformed; the message names it."""


class InvalidIdentifier(AmberError, ValueError):
    """An id or key name would be unsafe in a Redis key or SQL row; ``field`` names it."""


class AmbiguousId(InvalidIdentifier):
    """An id prefix names more than one thing; ``candidates`` lists a few of them."""


class StoreUnavailable(AmberError):
    """Redis or PostgreSQL did not answer within the timeout, or refused us."""


class MigrationError(AmberError):
    """The database schema could not be brought to the version this amber needs."""


class NotFound(AmberError, LookupError):
    """Something asked for by id does not exist (or has expired)."""


class CheckpointNotFound(NotFound):
    """No checkpoint exists for this analysis and agent type."""


class CheckpointCorrupt(AmberError):
    """A stored checkpoint failed to decode or its checksum did not match."""


class PayloadRefused(CheckpointCorrupt):
    """A stored value names a type outside the allow-list (or a pickle): it was not built.

    Carries the ids involved and ``type`` (``module.name``); allow a type you trust
    explicitly (``AmberSaver(..., allowed_types=[...])``) instead of loosening the decoder.
    """


class NotSupported(AmberError, NotImplementedError):
    """amber refuses this operation on this data; the message says why and what to do."""


class VersionTooNew(AmberError):
    """A record was written by a newer agent version than this code knows how to read."""


class ConsistencyError(AmberError):
    """Restored working memory does not match its snapshot (hash or key count)."""


class MemoryLost(ConsistencyError):
    """An agent's working memory was lost or replaced in Redis since it was recovered
    (a restart, a flush, an expiry): recover it before reading, writing or snapshotting."""


class MemoryContended(ConsistencyError):
    """Another writer kept writing to an agent's working memory while it was being
    restored: nothing was restored. Fence the memory off first (a run's token) or stop the
    other writer."""


class MemoryRollbackRefused(MemoryLost):
    """The working memory of an agent's newest checkpoint cannot be rebuilt, and the
    settings (``on_memory_lost="pause"``) say to pause rather than roll the agent back to
    the newest checkpoint whose memory can be (carries ``from_checkpoint``,
    ``to_checkpoint`` and ``rerun``, the steps a rollback would run again)."""


class Fenced(AmberError):
    """A write of a run that no longer holds its analysis's lease (taken over, given
    back, or ended) was refused by the statement or script that makes it: the run stops,
    having changed nothing (carries ``analysis_id`` and ``owner``, or ``agent_id``)."""


def fenced(analysis_id: str, owner: str, what: str) -> Fenced:
    """The error of a run's write refused because the run no longer holds the analysis."""
    return Fenced(
        f"run {owner} no longer holds analysis {analysis_id}: it may not {what}",
        analysis_id=analysis_id,
        owner=owner,
    )


class CheckpointConflict(AmberError):
    """A newer checkpoint of this agent exists: the writer continued from an older one
    and must not replace it (carries ``analysis_id``, ``agent_type``, ``seq``)."""


class UnsupportedType(AmberError, TypeError):
    """A Redis key holds a type amber cannot snapshot (e.g. a stream); names the key."""


class WrongType(AmberError, TypeError):
    """A working-memory command met a key of another type; names the key."""


class InvalidValue(AmberError, ValueError):
    """A value cannot be stored (wrong type, out of range, too long, not UTF-8).

    ``field`` names the argument or setting, ``key`` the working-memory key."""


class QuotaExceeded(AmberError):
    """An external API's call quota or rate limit is exhausted; the agent must stop."""


class AnalysisNotFound(NotFound):
    """No analysis with this id exists."""


class AnalysisStateError(AmberError):
    """The analysis is in a state that does not allow this operation."""


class AnalysisBusy(AnalysisStateError):
    """Another live process is running (or pausing) this analysis right now."""


class WalError(AmberError):
    """The write-ahead log or a checkpoint file could not be written or read."""


class WalCorruption(WalError):
    """A WAL segment or checkpoint file failed its checksum; names file and offset."""


class ValidationError(AmberError, ValueError):
    """A session, task or review failed validation; ``field`` names the first bad field."""


class VersionConflictError(AmberError):
    """A session was saved with a version other than the stored one; carries both."""


class SessionNotFoundError(NotFound):
    """No session with this id exists (or it has expired)."""


class RedisConnectionError(StoreUnavailable):
    """Redis did not answer within the timeout, or refused the connection."""


class UnknownAgent(NotFound):
    """An analysis names an agent its application does not register; carries
    ``agent_type``. The analysis is left as it was: run it with the right ``--app``."""


class RegistrationError(AmberError, ValueError):
    """An agent, analysis definition or step could not be registered (a duplicate name,
    an unknown agent in a definition, a function of the wrong shape)."""


class AppNotFound(ConfigError):
    """``--app module:attr`` (or ``AMBER_APP``) does not name an importable ``amber.App``."""


class CodeChanged(AmberError):
    """An agent's declared steps differ from those its analysis was started with, and no
    migration covers the change; the message names what was added and removed."""


class StepMismatch(AmberError):
    """A step key already recorded by one function was met again with another."""


class StepFailed(AmberError):
    """A step raised on every attempt its retry policy allows; carries ``step`` and
    ``attempts``, and the last error as ``__cause__``."""


class StepInDoubt(AmberError):
    """An at-most-once step started and never recorded its result (its process died), and
    its function takes no idempotency key: it is held until a person decides
    (``amber steps resolve``). Carries ``step_id``."""


class AwaitingReview(AmberError):
    """A step waits for a review's decision: the analysis pauses until it is decided.
    Carries ``review_id``."""


class ReviewNotFound(NotFound):
    """No review with this ``review_id`` exists (or, in the persistence module's queue,
    its ``expires_at`` has passed)."""


class ReviewAlreadyDecided(AmberError):
    """A review was decided before: the first decision stands (carries ``review_id`` and
    the stored ``decision``)."""
