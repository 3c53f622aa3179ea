"""A run that lost its lease changes nothing: every write it attempts is refused by the
statement or script that would make it, and it calls no step again.

Run A holds an analysis; its lease lapses as if its process had been frozen, and run B
(another stack: another process's connections and liveness lock) takes it over. Each
write A then attempts, working memory included, is refused; B's state is untouched.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

import amber
from amber import AnalysisBusy, Fenced
from amber.memory.apply import apply_memory
from amber.runtime.app import RESULT_KEY
from amber.schema import sql

from ..conftest import Engines

AppMaker = Callable[[], amber.App]
Namer = Callable[[str], str]


@pytest.fixture
def other(engines: Engines) -> Iterator[amber.Stack]:
    """Another process's view: its own pool, heartbeat and liveness lock."""
    with amber.connect(engines.redis_url, engines.database_url, prefix=engines.prefix) as s:
        yield s


@pytest.fixture
def quick(engines: Engines) -> Iterator[amber.Stack]:
    """A stack whose leases last half a second (a run that misses them stops)."""
    with amber.connect(
        engines.redis_url,
        engines.database_url,
        prefix=engines.prefix,
        lease_seconds=0.5,
        stuck_seconds=0.5,
    ) as s:
        yield s


def lapse(stack: amber.Stack, aid: str) -> None:
    """Let the analysis's lease run out now, as a frozen owner's would."""
    with stack.pg.connection() as conn:
        conn.execute(
            "UPDATE analyses SET lease_expires = NOW() - interval '1 second'"
            " WHERE analysis_id = %s",
            (aid,),
        )


T = TypeVar("T")


def taken_over(stack: amber.Stack, aid: str, claim: Callable[[], T | None]) -> T:
    """``claim()``'s claim, made once the analysis's lease has lapsed (:func:`lapse`). The
    owner's heartbeat runs here, where a frozen owner's would not, and may renew the
    lease between the lapse and the claim: then the lease is let lapse again."""
    for _ in range(5):
        lapse(stack, aid)
        got = claim()
        if got is not None:
            return got
    raise AssertionError("the lapsed lease was renewed before every claim")


def _entered(hold: contextlib.ExitStack, lock: contextlib.AbstractContextManager[T]) -> T | None:
    """``lock`` entered on ``hold``; None when a live run holds the analysis."""
    try:
        return hold.enter_context(lock)
    except AnalysisBusy:
        return None


def _app(new_app: AppMaker, name: Namer) -> tuple[amber.App, Any]:
    app = new_app()

    @app.agent(name=name("writer"), steps=["a", "b"])
    def writer(ctx: Any) -> int:
        return int(ctx.step("a", lambda: 1)) + int(ctx.step("b", lambda: 2))

    return app, writer


def test_every_write_of_a_run_that_lost_its_lease_is_refused(
    stack: amber.Stack, other: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, writer = _app(new_app, name)
    aid = app.submit(stack, [writer])
    record = stack.analyses.get(aid)
    with stack.analyses.runner_lock(aid) as mine:
        (agent,), _ = app.coordinator(stack).prepare_agents(record, mine.owner, token=mine.token)
        agent.l1_cache.set("note", "written by A")
        with contextlib.ExitStack() as hold:  # B takes the analysis over
            theirs = taken_over(stack, aid, lambda: _entered(hold, other.analyses.runner_lock(aid)))
            assert theirs.prior == mine.owner and theirs.token > mine.token
            (b_agent,), _ = app.coordinator(other).prepare_agents(
                record, theirs.owner, token=theirs.token
            )
            mem = agent.l1_cache
            with pytest.raises(Fenced):
                mem.set("note", "A again")
            with pytest.raises(Fenced):
                mem.delete("note")
            with pytest.raises(Fenced):
                mem.expire("note", 60)
            with pytest.raises(Fenced), mem.batch() as batch:
                batch.set("other", "A")
            with pytest.raises(Fenced):  # nor may its recovery restore over B's memory
                apply_memory(stack.redis, stack.keys, agent.agent_id, {}, 0, 10_000, mine.token)
            agent.complete("a", 1)
            with pytest.raises(Fenced):
                stack.checkpointer.save_checkpoint(agent, "a")
            assert not stack.analyses.run_event(aid, "released", mine.owner)
            co = app.coordinator(stack)
            with pytest.raises(Fenced):
                co.intents.begin(aid, agent.agent_id, agent.agent_type, "pay", "f", mine.owner)
            with pytest.raises(Fenced):
                co.reviews.open(
                    aid, agent.agent_id, agent.agent_type, "ok", "check", {}, None, "reject",
                    mine.owner,
                )  # fmt: skip
            with pytest.raises(Fenced):
                stack.analyses.finish(aid, "completed", [], mine.owner, owner=mine.owner)
            with pytest.raises(Fenced):
                stack.analyses.transition(aid, "paused", ("running",), mine.owner)
            # B's memory and the analysis are as B left them
            assert b_agent.l1_cache.get("note") == b"written by A"
            b_agent.l1_cache.set("note", "written by B")
            assert stack.analyses.get(aid).status == "running"
            assert stack.checkpointer.heads(aid) == {}
            # B finishes the analysis: afterwards A can write nothing either
            b_agent.complete("a", 1)
            other.checkpointer.save_checkpoint(b_agent, "a")
            other.analyses.finish(aid, "completed", [], theirs.owner, owner=theirs.owner)
        with pytest.raises(Fenced):
            agent.checkpoint_seq = 1
            stack.checkpointer.save_checkpoint(agent, "b")
        assert not stack.analyses.run_event(aid, "released", mine.owner)
    kinds = [e["kind"] for e in stack.analyses.timeline(aid)]
    assert kinds[-1] == "completed" and "released" not in kinds
    assert stack.checkpointer.heads(aid).get(agent.agent_type, 0) <= 1


def test_a_step_is_not_retried_after_the_run_lost_its_lease(
    quick: amber.Stack, other: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    """The call fails while the run is frozen and another run takes over: the retry loop
    asks whether the run still holds its lease, and stops instead of calling again."""
    import time

    app, calls = new_app(), Counter[str]()

    def flaky() -> int:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            taken_over(quick, aid, lambda: other.analyses.leases.claim(aid, "taker:1:x"))
            time.sleep(0.8)  # "frozen" past the lease
            raise TimeoutError("the client timed out while the process was frozen")
        return 1

    @app.agent(name=name("caller"), steps=["call"])
    def caller(ctx: Any) -> int:
        return int(ctx.step("call", flaky, retry=amber.Retry(attempts=3)))

    aid = app.submit(quick, [caller])
    (result,) = app.run(quick, aid).values()
    assert calls["flaky"] == 1
    assert result.status == "released"
    assert quick.analyses.get(aid).status == "running"  # the other run continues it
    assert "released" not in [e["kind"] for e in quick.analyses.timeline(aid)]


class _ReplyAfterFreeze:
    """A pool whose first claim's reply is read only after ``freeze()`` returns: the
    process froze once PostgreSQL had granted the claim, before it read the answer."""

    def __init__(self, pool: Any, freeze: Callable[[], None]) -> None:
        self.pool, self.freeze = pool, freeze

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.pool, attr)

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        with self.pool.connection() as conn:
            yield self._Conn(conn, self)

    class _Conn:
        def __init__(self, conn: Any, pool: _ReplyAfterFreeze) -> None:
            self.conn, self.pool = conn, pool

        def __getattr__(self, attr: str) -> Any:
            return getattr(self.conn, attr)

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            cursor = self.conn.execute(query, params, **kwargs)
            if query in (sql.CLAIM, sql.CLAIM_NEXT):  # once: the next claim is not held up
                freeze, self.pool.freeze = self.pool.freeze, lambda: None
                freeze()
            return cursor


def _one_step(new_app: AppMaker, kind: str, calls: Counter[str]) -> tuple[amber.App, Any]:
    app = new_app()

    def one() -> int:
        calls["one"] += 1
        return 1

    @app.agent(name=kind, steps=["one"])
    def first(ctx: Any) -> int:
        return int(ctx.step("one", one))

    return app, first


def _taken_over_while_frozen(
    quick: amber.Stack, other: amber.Stack, aid: str, monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    """Freeze ``quick``'s next claim past its lease, while ``other`` takes the analysis."""
    taken: list[Any] = []

    def freeze() -> None:
        time.sleep(0.8)  # the lease (half a second) lapses
        taken.append(other.analyses.leases.claim(aid, "taker:1:x"))

    leases = quick.analyses.leases
    monkeypatch.setattr(leases, "pg", _ReplyAfterFreeze(leases.pg, freeze))
    # no heartbeat: what the run knows of its lease is what its claim told it
    monkeypatch.setattr(leases, "_run", lambda: None)
    return taken


@pytest.mark.parametrize("how", ["run", "worker"])
def test_a_claim_answered_after_its_lease_lapsed_calls_no_step(
    how: str,
    quick: amber.Stack,
    other: amber.Stack,
    new_app: AppMaker,
    name: Namer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease counts from when the claim went out, not from its reply: a run whose
    process froze in between, while another run took the analysis over, finds its lease
    stale at its first step, asks PostgreSQL, and stops without calling the step."""
    calls, kind = Counter[str](), name("first")
    app, first = _one_step(new_app, kind, calls)
    aid = app.submit(quick, [first])
    taken = _taken_over_while_frozen(quick, other, aid, monkeypatch)
    if how == "run":
        (result,) = app.run(quick, aid).values()
        assert result.status == "released"
    else:  # a worker's claim of queued analyses
        leases = quick.analyses.leases
        (claim,) = leases.claim_next(f"w:1:{aid}", 1, known=[kind])
        assert leases.is_lost(claim.owner) and claim.owner in leases.lost
    assert taken and taken[0] is not None and taken[0].prior  # taken over from this run
    assert calls["one"] == 0


def test_an_at_most_once_step_that_raises_is_never_called_again(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, calls = new_app(), Counter[str]()

    def pay(amount: int) -> str:
        calls["pay"] += 1
        raise ConnectionResetError("the connection dropped after the request went out")

    @app.agent(name=name("payer"), steps=["pay"])
    def payer(ctx: Any) -> str:
        return str(ctx.step("pay", pay, 10, at_most_once=True, retry=amber.Retry(attempts=5)))

    aid = app.submit(stack, [payer])
    (result,) = app.run(stack, aid).values()
    assert calls["pay"] == 1
    assert result.status == "failed" and "never retried" in (result.error or "")
    assert stack.analyses.get(aid).status == "failed"


def test_a_result_postgresql_cannot_hold_fails_the_analysis_once(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    app, calls = new_app(), Counter[str]()

    def text() -> str:
        calls["text"] += 1
        return "a\x00b"

    @app.agent(name=name("nul"), steps=["text"])
    def nul(ctx: Any) -> str:
        return str(ctx.step("text", text))

    aid = app.submit(stack, [nul])
    (result,) = app.run(stack, aid).values()
    assert calls["text"] == 1
    assert result.status == "failed" and "NUL" in (result.error or "")
    assert stack.analyses.get(aid).status == "failed"
    (kept,) = stack.analyses.results(aid)
    assert "NUL" in kept["result"]["error"]
    assert RESULT_KEY not in result.deliverables


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # the test asserts on it
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_write_racing_a_takeover_commits_before_it_or_not_at_all(
    stack: amber.Stack, new_app: AppMaker, name: Namer
) -> None:
    """The fence locks the analysis's row until the write commits: a takeover waits for a
    fenced write in flight (and its run then sees what was written), and a write that
    comes while a takeover is in flight waits for it and is refused."""
    app, writer = _app(new_app, name)
    aid = app.submit(stack, [writer])
    take = "UPDATE analyses SET lease_owner = %s WHERE analysis_id = %s"
    with stack.pg.connection() as conn:
        conn.execute(take, ("run-a", aid))
    event = {"analysis_id": aid, "kind": "released", "by": "run-a", "detail": "{}"}
    with stack.pg.connection() as a, a.transaction():  # run A's write, not yet committed
        assert a.execute(sql.RUN_EVENT, {**event, "owner": "run-a"}).rowcount == 1
        takeover, _ = _in_thread(lambda: _write(stack, take, ("run-b", aid)))
        takeover.join(0.5)
        assert takeover.is_alive()  # waits for A's write to commit
    takeover.join(10)
    assert not takeover.is_alive()

    with stack.pg.connection() as conn:
        conn.execute(take, ("run-a", aid))
    agent = app.coordinator(stack).prepare_agents(stack.analyses.get(aid), "run-a")[0][0]
    with stack.pg.connection() as b, b.transaction():  # run B's takeover, not yet committed
        b.execute(take, ("run-b", aid))
        save, out = _in_thread(lambda: stack.checkpointer.save_checkpoint(agent, None))
        save.join(0.5)
        assert save.is_alive()  # A's checkpoint waits for the takeover
    save.join(10)
    assert isinstance(out.get("error"), Fenced)
    with stack.pg.connection() as conn:
        rows = conn.execute(
            "SELECT count(*) FROM agent_checkpoints WHERE analysis_id = %s", (aid,)
        ).fetchone()
    assert rows == (0,)


def _write(stack: amber.Stack, statement: str, params: tuple[Any, ...]) -> None:
    with stack.pg.connection() as conn:
        conn.execute(statement, params)
