"""Durable steps: retry policies, function identity, and at-most-once intents.

A step's result is recorded under its key in the agent's checkpoint, so a resumed agent
gets the recorded result instead of calling again. A step declared ``at_most_once``
also leaves an *intent* in PostgreSQL before it calls out: if its process dies before
the result is recorded, the intent shows the step is *in doubt*. It is re-run only when
its function takes the ``idempotency_key`` amber hands it (the outside world then
deduplicates), otherwise it is held until a person decides (``resolve``).
"""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from amber import codec, defaults
from amber.errors import AnalysisStateError, InvalidValue, NotFound, fenced
from amber.keys import check_reason, check_uuid
from amber.runtime import sql
from amber.runtime.decided import note_and_resume
from amber.schema import sql as core_sql

STEP_KEY_MAX_LEN = 512
"""Longest step key."""

IDEMPOTENCY_KEY = "idempotency_key"
"""The keyword argument through which an at-most-once step receives its idempotency key."""


@dataclass(frozen=True)
class Retry:
    """How often a failing step is tried, and how long to wait between tries.

    The wait before try ``n + 1`` is ``backoff * multiplier ** (n - 1)``, at most
    ``max_backoff`` seconds.
    """

    attempts: int = 3
    backoff: float = 0.0
    multiplier: float = 2.0
    max_backoff: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise InvalidValue("attempts must be an integer", field="attempts")
        if not 1 <= self.attempts <= 1_000:
            raise InvalidValue("attempts must be between 1 and 1000", field="attempts")
        for name in ("backoff", "multiplier", "max_backoff"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (0 <= value <= 86_400)
            ):
                raise InvalidValue(f"{name} must be a number from 0 to 86400", field=name)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based)."""
        return float(min(self.max_backoff, self.backoff * self.multiplier ** (attempt - 1)))


def check_step_key(key: object) -> str:
    """A step key: a non-empty string of at most 512 characters, no NUL; a ``str``
    subclass (a string enum) as the plain string it holds, which is how it is stored."""
    if not isinstance(key, str) or not key or len(key) > STEP_KEY_MAX_LEN or "\x00" in key:
        raise InvalidValue(
            f"a step key must be a non-empty string of at most {STEP_KEY_MAX_LEN} characters"
            " without NUL",
            field="key",
            value=key,
        )
    return str.__str__(key)


def fn_name(fn: Callable[..., Any]) -> str:
    """A function's identity as recorded with its step: ``module:qualname``."""
    target = inspect.unwrap(fn)
    module = getattr(target, "__module__", None) or "?"
    qual = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}:{qual}"


def takes_idempotency_key(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` accepts ``idempotency_key=`` (so re-running it cannot act twice)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return IDEMPOTENCY_KEY in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )


@dataclass(frozen=True)
class Intent:
    """An at-most-once step's intent record."""

    step_id: str
    analysis_id: str
    agent_id: str
    agent_type: str
    step_key: str
    fn: str
    status: str
    """``started`` (in doubt unless its run is alive), ``done``, ``rerun`` or ``skip``."""
    result: Any
    started_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    fresh: bool
    """Created by this call: no earlier attempt exists."""
    resumed: bool = False
    """Set by ``resolve``: the decision queued the analysis again (it had paused for this
    step and no other of its steps is in doubt)."""

    @property
    def idempotency_key(self) -> str:
        """The key handed to the step's function: the same on every attempt."""
        return self.step_id

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "step_id": self.step_id,
            "analysis_id": self.analysis_id,
            "agent_id": self.agent_id,
            "agent_type": self.agent_type,
            "step": self.step_key,
            "fn": self.fn,
            "status": self.status,
            "started_at": self.started_at.isoformat(),
            "resumed": self.resumed,
        }


def _intent(row: tuple[Any, ...]) -> Intent:
    return Intent(str(row[0]), str(row[1]), *row[2:])


class StepIntents:
    """The intents of at-most-once steps, in PostgreSQL."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pg = pool

    def begin(
        self,
        analysis_id: str,
        agent_id: str,
        agent_type: str,
        key: str,
        fn: str,
        owner: str | None = None,
    ) -> Intent:
        """Record (or find) the intent of step ``key``: durable before the call goes out.

        The step id is derived from the analysis, agent and key, so it is the same
        idempotency key on every attempt. With ``owner`` (the run making the call) the
        statement is fenced by its lease: ``Fenced``, and nothing written, once the run
        no longer holds the analysis.
        """
        step_id = str(uuid.uuid5(uuid.UUID(analysis_id), f"{agent_id}\x00{key}"))
        params = {
            "step_id": step_id,
            "analysis_id": analysis_id,
            "agent_id": agent_id,
            "agent_type": agent_type,
            "key": key,
            "fn": fn,
            "owner": owner,
        }
        with self.pg.connection() as conn:
            row = conn.execute(sql.BEGIN_INTENT, params).fetchone()
        if row is None:
            assert owner is not None
            raise fenced(analysis_id, owner, f"start step {key!r}")
        return _intent(row)

    def finish(self, step_id: str) -> None:
        """The step's result is recorded: its intent is no longer in doubt."""
        with self.pg.connection() as conn:
            conn.execute(sql.FINISH_INTENT, (step_id,))

    def get(self, step_id: object) -> Intent:
        """One intent; ``NotFound`` if there is none."""
        sid = check_uuid(step_id, "step_id")
        with self.pg.connection() as conn:
            row = conn.execute(sql.INTENT, (sid,)).fetchone()
        if row is None:
            raise NotFound("no at-most-once step with this id", step_id=sid)
        return _intent(row)

    def in_doubt(self, analysis_id: object = None, limit: int = 100) -> list[Intent]:
        """Steps that started and never recorded a result, of analyses no run holds."""
        aid = None if analysis_id is None else check_uuid(analysis_id)
        with self.pg.connection() as conn:
            rows = conn.execute(
                sql.IN_DOUBT, {"aid": aid, "limit": limit, "space": core_sql.LIVENESS_SPACE}
            ).fetchall()
        return [_intent(r) for r in rows]

    def count_in_doubt(self) -> int:
        """How many steps are in doubt, of every analysis."""
        with self.pg.connection() as conn:
            row = conn.execute(sql.COUNT_IN_DOUBT, {"space": core_sql.LIVENESS_SPACE}).fetchone()
        return int(row[0]) if row else 0

    def ids_like(self, prefix: str, limit: int = 5) -> list[str]:
        """Step ids that start with ``prefix``, at most ``limit``."""
        with self.pg.connection() as conn:
            rows = conn.execute(sql.STEP_IDS_LIKE, (core_sql.like_prefix(prefix), limit))
            return [str(r[0]) for r in rows.fetchall()]

    def resolve(
        self, step_id: object, rerun: bool, result: Any = None, by: str = "amber"
    ) -> Intent:
        """Decide an in-doubt step once: re-run it, or skip it with ``result`` as its result.

        ``AnalysisStateError`` if it was decided (or finished) already.
        """
        sid = check_uuid(step_id, "step_id")
        by = check_reason(by, "by")
        if not rerun:
            codec.json_value(result, "result", defaults.DOCUMENT_MAX_BYTES)
        current = self.get(sid)
        params = {
            "to": "rerun" if rerun else "skip",
            "result": None if rerun else Jsonb(result),
            "by": by,
            "step_id": sid,
        }
        with self.pg.connection() as conn, conn.transaction():
            conn.execute(sql.LOCK_ANALYSIS, (current.analysis_id,))
            row = conn.execute(sql.RESOLVE_INTENT, params).fetchone()
            resumed = row is not None and _resolved(conn, _intent(row), by)
        if row is None:
            raise AnalysisStateError(
                f"step is {current.status}, not in doubt: nothing to resolve",
                step_id=sid,
                status=current.status,
            )
        return dataclasses.replace(_intent(row), resumed=resumed)


def _resolved(conn: psycopg.Connection[Any], intent: Intent, by: str) -> bool:
    """Record the decision on the analysis's timeline; queue the analysis again if it
    paused for this step and none of its steps is in doubt now (whether it was)."""
    detail = {"step_id": intent.step_id, "step": intent.step_key, "action": intent.status}
    return note_and_resume(
        conn,
        intent.analysis_id,
        "step_resolved",
        detail,
        by,
        sql.RESUME_AFTER_STEP,
        "step_in_doubt",
    )
