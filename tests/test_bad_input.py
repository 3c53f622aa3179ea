"""Arbitrary input (NUL, lone surrogates, huge strings, bytes, any number) either works
or is refused with an ``AmberError`` naming what was wrong, and a refused call changes
nothing already stored. Property tests (hypothesis) against the suite's real servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import string
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, ClassVar

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import amber
from amber import (
    AmberError,
    ConfigError,
    InvalidIdentifier,
    InvalidValue,
    StoreUnavailable,
    defaults,
)
from amber.agents.base import BaseAgent
from amber.cli import app
from amber.config import Settings, known_variables, load_settings
from amber.engines.connect import open_redis
from amber.examples import ANALYSTS
from amber.keys import (
    check_id,
    check_int,
    check_key,
    check_reason,
    check_seq,
    check_text,
    check_ticker,
    check_utf8,
    check_uuid,
    check_version,
)
from amber.memory import AgentMemory, read_memory
from amber.persistence import (
    PersistenceManager,
    ReviewAlreadyDecided,
    ReviewNotFound,
    SessionNotFoundError,
    ValidationError,
    VersionConflictError,
)

from .conftest import Engines, delete_prefix, scan_prefix

FEW = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""For examples that talk to the servers."""
MANY = settings(max_examples=300, deadline=None, database=None)
"""For the pure validators."""

# -- what is thrown ------------------------------------------------------------------------
CHARS = st.characters(exclude_categories=())  # every code point: NUL and surrogates too
NASTY = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "a\x00b",
        "\ud800",
        "x\udcffy",
        "\udfff",
        "*",
        "a?",
        "[x]",
        "{t}",
        "a:b",
        "back\\slash",
        " pad",
        "tab\t",
        "line\nbreak",
        "é",
        "😀",
        "[/x]",
        ":smile:",
        "--help",
        "x" * 129,
        "x" * 1001,
        "x" * 100_000,
    ]
)
TEXT = st.one_of(NASTY, st.text(CHARS, max_size=40), st.text(max_size=200))
NUMBERS = st.one_of(
    st.integers(),
    st.floats(),
    st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, 10**400, float("nan"), float("inf")]),
)
ANYTHING = st.one_of(TEXT, st.binary(max_size=64), NUMBERS, st.booleans(), st.none())


def utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def field_of(exc: AmberError) -> object:
    """The ``field`` an error names."""
    return exc.context.get("field")


# -- validators ----------------------------------------------------------------------------
TEXT_CHECKS: list[tuple[Callable[[object], str], str, int, type[AmberError]]] = [
    (lambda v: check_text(v, "note", 50), "note", 50, InvalidValue),
    (lambda v: check_reason(v, "by"), "by", defaults.REASON_MAX_LEN, InvalidValue),
    (check_version, "agent_version", defaults.VERSION_MAX_LEN, InvalidValue),
    (check_ticker, "stock_ticker", defaults.TICKER_MAX_LEN, InvalidIdentifier),
    (lambda v: check_id(v, "agent_id"), "agent_id", defaults.ID_MAX_LEN, InvalidIdentifier),
    (check_key, "key name", defaults.KEY_MAX_LEN, InvalidIdentifier),
]


@MANY
@given(value=ANYTHING)
def test_text_validators_pass_only_storable_text(value: object) -> None:
    for check, field, max_len, error in TEXT_CHECKS:
        try:
            out = check(value)
        except AmberError as exc:
            assert type(exc) is error and field_of(exc) == field, (field, exc)
            assert field in exc.message
        else:
            assert out is value and isinstance(out, str)
            assert 0 < len(out) <= max_len and "\x00" not in out and utf8(out)


@MANY
@given(value=ANYTHING, lo=st.integers(-5, 5), span=st.integers(0, 2**64))
def test_check_int_passes_only_ints_in_range(value: object, lo: int, span: int) -> None:
    hi = lo + span
    try:
        out = check_int(value, "n", lo, hi)
    except InvalidValue as exc:
        assert field_of(exc) == "n"
        assert type(value) is not int or not lo <= value <= hi
    else:
        assert type(out) is int and lo <= out <= hi
    try:
        seq = check_seq(value)
    except InvalidValue as exc:
        assert field_of(exc) == "seq"
    else:
        assert 0 <= seq <= defaults.SEQ_MAX


@MANY
@given(value=ANYTHING)
def test_check_utf8_and_check_uuid(value: object) -> None:
    try:
        assert check_utf8(value, "value", key="k") is value
    except InvalidValue as exc:
        assert isinstance(value, str) and not utf8(value) and exc.context["key"] == "k"
    try:
        out = check_uuid(value, "checkpoint_id")
    except InvalidIdentifier as exc:
        assert field_of(exc) == "checkpoint_id"
    else:
        assert str(uuid.UUID(out)) == out


# -- working memory ------------------------------------------------------------------------
STORABLE = st.one_of(  # values AgentMemory takes today: no lone surrogates in text
    st.binary(max_size=200),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=50),
    NASTY.filter(utf8),
    NUMBERS,
    st.booleans(),
    st.none(),
)
SCORES = st.one_of(st.floats(), st.integers(-(2**53), 2**53))
WRITES = ("set", "hset", "rpush", "sadd", "zadd")


def write(mem: AgentMemory, op: str, name: Any, value: Any, score: Any = 1.0) -> None:
    """One working-memory write of ``value`` to ``name``."""
    if op == "set":
        mem.set(name, value)
    elif op == "hset":
        mem.hset(name, value, value)
    elif op == "rpush":
        mem.rpush(name, value)
    elif op == "sadd":
        mem.sadd(name, value)
    else:
        mem.zadd(name, {value: score})


@contextlib.contextmanager
def fresh_memory(stack: amber.Stack) -> Iterator[AgentMemory]:
    """The memory of a new agent, holding one key, cleared afterwards."""
    mem = stack.memory(f"bad-input-{uuid.uuid4().hex[:12]}")
    mem.set("kept", "before")
    try:
        yield mem
    finally:
        mem.clear()


def memory_hash(stack: amber.Stack, mem: AgentMemory) -> str:
    """SHA-256 over the agent's keys, types and values."""
    return read_memory(stack.redis, stack.keys, mem.agent_id).hash


@settings(FEW, max_examples=100)
@given(op=st.sampled_from(WRITES), name=ANYTHING, value=STORABLE, score=SCORES)
def test_memory_writes_work_or_are_refused_changing_nothing(
    stack: amber.Stack, op: str, name: object, value: object, score: float
) -> None:
    with fresh_memory(stack) as mem:
        with contextlib.suppress(AmberError):  # the key exists already, if it can
            write(mem, op, name, "before")
        before = memory_hash(stack, mem)
        try:
            write(mem, op, name, value, score)
        except AmberError:
            assert memory_hash(stack, mem) == before
        try:
            mem.get(name)  # type: ignore[arg-type]
            mem.exists(name)  # type: ignore[arg-type]
        except InvalidIdentifier as exc:
            assert field_of(exc) == "key name"
        except AmberError:
            pass  # WrongType: the key holds a hash, a list, ...


SURROGATES = st.one_of(
    st.sampled_from(["\ud800", "a\udcffb", "\udfff" * 3]),
    st.text(CHARS, min_size=1, max_size=20).filter(lambda t: not utf8(t)),
)


@FEW
@given(op=st.sampled_from(WRITES), value=SURROGATES)
def test_memory_values_with_lone_surrogates_are_invalid_values_naming_the_key(
    stack: amber.Stack, op: str, value: str
) -> None:
    with fresh_memory(stack) as mem:
        before = memory_hash(stack, mem)
        with pytest.raises(InvalidValue) as info:
            write(mem, op, "k", value)
        assert info.value.context.get("key") == "k"
        assert memory_hash(stack, mem) == before


@FEW
@given(score=st.one_of(st.integers(), TEXT, st.binary(max_size=8), st.none()))
def test_memory_zadd_scores_that_are_not_numbers_are_invalid_values(
    stack: amber.Stack, score: object
) -> None:
    with fresh_memory(stack) as mem:
        before = memory_hash(stack, mem)
        try:
            mem.zadd("z", {"m": score})  # type: ignore[dict-item]
        except InvalidValue as exc:
            assert exc.context.get("key") == "z"
            assert memory_hash(stack, mem) == before


@pytest.fixture(autouse=True, scope="module")
def _elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Relative data directories the fuzzing makes up land in a temporary folder."""
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    try:
        yield
    finally:
        os.chdir(before)


# -- settings ------------------------------------------------------------------------------
CONNECT_PARAMS = {"redis_url", "database_url", "data_dir", "prefix"}
SETTING_NAMES = st.one_of(
    st.sampled_from(sorted(set(Settings.model_fields) - {"redis_url", "database_url"})),
    st.text(max_size=20).filter(lambda n: n not in CONNECT_PARAMS),
)


@FEW
@given(name=SETTING_NAMES, value=ANYTHING)
def test_connect_takes_a_setting_or_names_it(engines: Engines, name: str, value: object) -> None:
    try:
        with amber.connect(engines.redis_url, engines.database_url, **{name: value}) as stack:
            assert name in Settings.model_fields and stack.settings
    except ConfigError as exc:
        assert exc.context.get("setting") == name
    except StoreUnavailable:
        assert name == "connect_timeout"  # so short that nothing can answer


@MANY
@given(redis_url=ANYTHING, database_url=ANYTHING, data_dir=ANYTHING)
def test_urls_and_data_dir_are_settings_or_named(
    redis_url: object, database_url: object, data_dir: object
) -> None:
    given = {"redis_url": redis_url, "database_url": database_url, "data_dir": data_dir}
    try:
        cfg = load_settings(**given)
    except ConfigError as exc:
        assert exc.context.get("setting") in given
    else:
        assert cfg.redis_url is None or "\x00" not in cfg.redis_url
        assert "\x00" not in os.fsdecode(os.fsencode(cfg.data_dir))


@MANY
@given(suffix=st.text(string.ascii_letters + string.digits + "_", min_size=1, max_size=30))
def test_unknown_amber_variables_are_refused(suffix: str) -> None:
    name = f"AMBER_{suffix}"
    saved = os.environ.get(name)
    os.environ[name] = "1" if name.upper() not in known_variables() else os.environ.get(name, "")
    try:
        load_settings()
    except ConfigError as exc:
        assert exc.context.get("variable") == name or exc.context.get("setting")
        assert name.upper() not in known_variables() or exc.context.get("setting")
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


# -- the persistence module ----------------------------------------------------------------
SESSION = {"goal": "g", "status": "planning"}
TASK = {"type": "mcp_call", "mcp_tool": "search", "parameters": {"q": "x"}}
REVIEW = {"task_id": "t", "confidence": 0.5}
FIELDS = {
    "session": ["session_id", "goal", "status", "task_queue", "version", "extra"],
    "task": ["id", "type", "mcp_tool", "parameters", "timeout", "session_id", "extra"],
    "review": [
        "review_id",
        "task_id",
        "confidence",
        "expires_at",
        "kind",
        "payload",
        "decision",
        "decided_by",
        "decided_at",
        "comment",
        "extra",
    ],
    "decide": ["review_id", "decision", "by", "comment"],
}


class Persistence:
    """A manager under its own prefix, an event loop to run it, a raw client to look."""

    def __init__(self, engines: Engines) -> None:
        self.prefix = f"{engines.prefix}-bad-input"
        self.loop = asyncio.Runner()
        self.pm = PersistenceManager(engines.redis_url, prefix=self.prefix)
        self.url = engines.redis_url
        self.raw = open_redis(engines.redis_url, 5.0)
        self.pg = psycopg.connect(engines.database_url, autocommit=True)

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        """Run one call of the manager."""
        return self.loop.run(work)

    def state(self) -> dict[bytes, object]:
        """Every key under the prefix with its value (TTLs aside)."""
        out: dict[bytes, object] = {}
        for key in sorted(scan_prefix(self.raw, self.prefix)):
            kind = self.raw.type(key)
            if kind == b"string":
                out[key] = self.raw.get(key)
            elif kind == b"list":
                out[key] = self.raw.lrange(key, 0, -1)
            elif kind == b"set":
                out[key] = sorted(self.raw.smembers(key))
            elif kind == b"zset":
                out[key] = self.raw.zrange(key, 0, -1, withscores=True)
            else:
                out[key] = kind
        reviews = self.pg.execute(  # the module's reviews are rows in PostgreSQL
            "SELECT review_id, status, decision::text, payload::text, deadline FROM reviews"
            " WHERE scope = %s ORDER BY review_id",
            (self.prefix,),
        )
        out[b"(reviews)"] = reviews.fetchall()
        return out

    def close(self) -> None:
        """Close the manager and delete what the tests stored."""
        self.run(self.pm.close())
        self.pg.close()
        self.loop.close()
        self.raw.close()
        delete_prefix(self.url, self.prefix)


@pytest.fixture(scope="module")
def persistence(engines: Engines) -> Iterator[Persistence]:
    p = Persistence(engines)
    p.run(p.pm.save_session({"session_id": "seed", **SESSION}))
    p.run(p.pm.save_task({"id": "seed-task", **TASK}, "seed"))
    p.run(p.pm.save_review({"review_id": "seed-review", **REVIEW}))
    yield p
    p.close()


def persistence_call(
    pm: PersistenceManager, op: str, field: str, arg: Any
) -> Coroutine[Any, Any, Any]:
    """One call of the public API with ``arg`` somewhere in it."""
    new = uuid.uuid4().hex[:12]
    if op == "save_session":
        return pm.save_session({"session_id": f"s-{new}", **SESSION, field: arg})
    if op == "save_task":
        return pm.save_task({"id": f"t-{new}", **TASK, field: arg}, "seed")
    if op == "save_task_into":
        return pm.save_task({"id": f"t-{new}", **TASK}, arg)
    if op == "save_review":
        return pm.save_review({"review_id": f"r-{new}", **REVIEW, field: arg})
    if op == "decide":
        call = {"review_id": "seed-review", "decision": "rejected", "by": "x", field: arg}
        return pm.decide(**call)
    if op == "save_document":
        kind = field.split(".")[0]
        save = {"session": pm.save_session, "task": pm.save_task, "review": pm.save_review}
        return save[kind](arg)
    method: Callable[[Any], Coroutine[Any, Any, Any]] = getattr(pm, op)
    return method(arg)


PERSISTENCE_OPS = st.one_of(
    st.tuples(st.just("save_session"), st.sampled_from(FIELDS["session"])),
    st.tuples(st.just("save_task"), st.sampled_from(FIELDS["task"])),
    st.tuples(st.just("save_review"), st.sampled_from(FIELDS["review"])),
    st.tuples(st.just("decide"), st.sampled_from(FIELDS["decide"])),
    st.tuples(st.just("save_document"), st.sampled_from(["session", "task", "review"])),
    st.tuples(
        st.sampled_from(
            [
                "save_task_into",
                "get_session",
                "delete_session",
                "list_sessions",
                "get_task",
                "next_task",
                "list_tasks",
                "get_review",
                "list_reviews",
                "remove_review",
            ]
        ),
        st.just(""),
    ),
)


@settings(FEW, max_examples=200)
@given(op=PERSISTENCE_OPS, arg=ANYTHING)
def test_persistence_works_or_names_the_field_changing_nothing(
    persistence: Persistence, op: tuple[str, str], arg: object
) -> None:
    before = persistence.state()
    try:
        persistence.run(persistence_call(persistence.pm, *op, arg))
    except (ValidationError, InvalidIdentifier) as exc:
        assert isinstance(field_of(exc), str) and field_of(exc), exc
        assert persistence.state() == before
    except (
        SessionNotFoundError,
        VersionConflictError,
        ReviewNotFound,
        ReviewAlreadyDecided,
    ):
        assert persistence.state() == before


# -- the command line ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def running_analysis(stack: amber.Stack) -> str:
    return stack.coordinator.start_analysis("AAPL", ANALYSTS)


COMMANDS: dict[str, Callable[[str, str], list[str]]] = {
    "analyses list --status": lambda arg, _: ["analyses", "list", "--status", arg],
    "checkpoints show": lambda arg, _: ["checkpoints", "show", arg],
    "memory show": lambda arg, _: ["memory", "show", arg],
    "sessions show": lambda arg, _: ["sessions", "show", arg],
    "pause ID": lambda arg, _: ["pause", arg, "--reason", "fuzz"],
    "pause --reason": lambda arg, aid: ["pause", aid, "--reason", arg],
    "resume --by": lambda arg, aid: ["resume", aid, "--by", arg],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(FEW, max_examples=20)
@given(arg=TEXT)
def test_cli_answers_bad_input_in_one_line(
    engines: Engines, running_analysis: str, command: str, arg: str
) -> None:
    result = CliRunner().invoke(app, COMMANDS[command](arg, running_analysis))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code in (0, 1, 2) and "Traceback" not in result.output
    if result.exit_code == 1:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output


# -- calls wired in by other modules -------------------------------------------------------
class Probe(BaseAgent):
    """An agent whose version the tests set."""

    agent_type = "bad_input_probe"
    version: ClassVar[str] = "1.0"
    subtasks = ("one",)

    def run_subtask(self, name: str) -> Any:
        """Nothing to do."""
        return name


def analyses_count(stack: amber.Stack) -> int:
    """Rows in the analyses table."""
    with stack.pg.connection() as conn:
        row = conn.execute("SELECT count(*) FROM analyses").fetchone()
    return int(row[0]) if row else 0


def storable(check: Callable[[object], object], value: object) -> bool:
    """Whether ``check`` passes ``value``."""
    try:
        check(value)
    except AmberError:
        return False
    return True


@settings(FEW, max_examples=40)
@given(ticker=ANYTHING, version=ANYTHING)
@example(ticker="T" * (defaults.TICKER_MAX_LEN + 1), version="1.0")
@example(ticker="AAPL", version="v" * (defaults.VERSION_MAX_LEN + 1))
@example(ticker="AAPL", version="1.0\x00")
def test_start_analysis_checks_ticker_and_versions(
    stack: amber.Stack, ticker: object, version: object
) -> None:
    Probe.version = version  # type: ignore[assignment]
    before = analyses_count(stack)
    try:
        stack.coordinator.start_analysis(ticker, [Probe])  # type: ignore[arg-type]
    except InvalidIdentifier as exc:
        assert field_of(exc) == "stock_ticker"
        assert analyses_count(stack) == before
    except InvalidValue as exc:
        assert field_of(exc) == "agent_version"
        assert analyses_count(stack) == before
    else:
        assert storable(check_ticker, ticker) and storable(check_version, version)
    finally:
        Probe.version = "1.0"


@settings(FEW, max_examples=25)
@given(reason=ANYTHING, by=ANYTHING)
@example(reason="quota\x00", by="cli")
@example(reason="r" * (defaults.REASON_MAX_LEN + 1), by="cli")
@example(reason="quota", by="\ud800")
def test_pause_and_resume_check_reason_and_who(
    stack: amber.Stack, reason: object, by: object
) -> None:
    analysis_id = stack.coordinator.start_analysis("AAPL", [Probe])
    try:
        stack.pause_manager.pause(analysis_id, reason, by)  # type: ignore[arg-type]
    except InvalidValue as exc:
        assert field_of(exc) in ("reason", "by")
        assert stack.analyses.get(analysis_id).status == "running"
        return
    assert storable(check_reason, reason) and storable(lambda v: check_reason(v, "by"), by)
    try:
        stack.pause_manager.resume(analysis_id, by)  # type: ignore[arg-type]
    except InvalidValue as exc:
        assert field_of(exc) == "by"
        assert stack.analyses.get(analysis_id).status == "paused"


@pytest.mark.parametrize(
    "config",
    [{"n": 2**70}, {"s": {1, 2}}, {"text": "a\x00b"}, "not a dict"],
)
def test_agent_config_that_postgresql_cannot_store_is_named(
    stack: amber.Stack, config: object
) -> None:
    before = analyses_count(stack)
    with pytest.raises(InvalidValue) as err:
        stack.coordinator.start_analysis("AAPL", [Probe], config=config)  # type: ignore[arg-type]
    assert field_of(err.value) == "config"
    assert analyses_count(stack) == before
