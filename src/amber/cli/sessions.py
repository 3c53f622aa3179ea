"""``amber sessions list|show``: the persistence module's sessions and their queued tasks.

Its reviews are amber's reviews: ``amber reviews list`` (``amber.cli.runtime``) shows them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import typer

from amber.cli.app import OPTIONS, app, console, friendly
from amber.cli.output import Col, JsonFlag, Limit, print_json, table
from amber.errors import SessionNotFoundError

if TYPE_CHECKING:
    from amber.persistence import PersistenceManager

sessions_app = typer.Typer(help="Agent sessions and their task queues.", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")

T = TypeVar("T")


def _with_manager(work: Callable[[PersistenceManager], Awaitable[T]]) -> T:
    """Run ``work`` on a manager opened with the shared options, then close it."""
    import asyncio

    from amber.persistence import PersistenceManager

    async def run() -> T:
        async with PersistenceManager(
            OPTIONS.redis_url, prefix=OPTIONS.prefix, data_dir=OPTIONS.data_dir
        ) as pm:
            return await work(pm)

    return asyncio.run(run())


@sessions_app.command("list")
@friendly
def list_sessions(limit: Limit = 100, as_json: JsonFlag = False) -> None:
    """List live sessions, most recently saved first."""
    sessions = _with_manager(lambda pm: pm.list_sessions(limit))
    if as_json:
        print_json([s.model_dump(mode="json") for s in sessions])
        return
    table(
        [
            Col("session_id", "id"),
            Col("status"),
            Col("version"),
            Col("planned tasks"),
            Col("goal", "text"),
        ],
        [
            [s.session_id, s.status, str(s.version), str(len(s.task_queue)), s.goal]
            for s in sessions
        ],
    )
    console.print(f"{len(sessions)} session(s)")


@sessions_app.command("show")
@friendly
def show_session(session_id: str, as_json: JsonFlag = False) -> None:
    """Show one session and the tasks still queued in it."""
    from amber.persistence import Session, Task

    async def load(pm: PersistenceManager) -> tuple[Session, list[Task]]:
        session = await pm.get_session(session_id)
        if session is None:
            raise SessionNotFoundError("no such session", session_id=session_id)
        return session, await pm.list_tasks(session_id)

    session, tasks = _with_manager(load)
    if as_json:
        doc = session.model_dump(mode="json")
        print_json({"session": doc, "tasks": [t.model_dump(mode="json") for t in tasks]})
        return
    console.print_json(data=session.model_dump(mode="json"))
    rows = []
    for t in tasks:
        timeout = "" if t.timeout is None else f"{t.timeout:g}s"
        rows.append([t.id, t.type, t.mcp_tool or "", timeout, str(t.parameters)])
    table(
        [
            Col("task id", "id"),
            Col("type"),
            Col("mcp_tool"),
            Col("timeout"),
            Col("parameters", "text"),
        ],
        rows,
    )
    console.print(f"{len(tasks)} queued task(s)")
