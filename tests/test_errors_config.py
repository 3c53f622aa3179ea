"""Errors carry their context and pickle; settings come from the environment."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from amber import (
    AmberError,
    CheckpointNotFound,
    ConfigError,
    Durability,
    NotFound,
    Settings,
    defaults,
)
from amber.config import known_variables, load_settings


def test_error_context_in_str_attrs_and_pickle() -> None:
    err = CheckpointNotFound("no checkpoint", analysis_id="a1", agent_type="t")
    assert "analysis_id='a1'" in str(err) and err.agent_type == "t"  # type: ignore[attr-defined]
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is CheckpointNotFound and back.context == err.context
    assert isinstance(back, NotFound) and isinstance(back, AmberError)


def test_settings_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMBER_PREFIX", raising=False)
    cfg = load_settings()
    assert cfg.prefix == defaults.PREFIX
    assert cfg.active_ttl == 24 * 3600 and cfg.paused_ttl == 14 * 24 * 3600
    assert cfg.checkpoint_backup_ttl == 7 * 24 * 3600 and cfg.snapshot_ttl == 14 * 24 * 3600
    monkeypatch.setenv("AMBER_DURABILITY", "wal")
    monkeypatch.setenv("AMBER_ACTIVE_TTL", "60")
    cfg = load_settings()
    assert cfg.durability is Durability.WAL and cfg.active_ttl == 60


def test_malformed_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_DURABILITY", "sometimes")
    with pytest.raises(ConfigError, match="AMBER_DURABILITY"):
        load_settings()
    monkeypatch.delenv("AMBER_DURABILITY")
    with pytest.raises(ConfigError, match="AMBER_ACTIVE_TTL"):
        load_settings(active_ttl=-5)


def test_unknown_setting_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"'durabilty'.*did you mean 'durability'") as info:
        load_settings(durabilty="wal")
    assert info.value.setting == "durabilty"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        Settings(colour="red")  # type: ignore[call-arg]


def test_unknown_amber_variable_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_DURABILTY", "wal")
    with pytest.raises(ConfigError, match=r"AMBER_DURABILTY.*AMBER_DURABILITY") as info:
        load_settings()
    assert info.value.variable == "AMBER_DURABILTY"  # type: ignore[attr-defined]
    monkeypatch.delenv("AMBER_DURABILTY")
    monkeypatch.setenv("amber_nonsense", "1")  # read case-insensitively, so checked so too
    with pytest.raises(ConfigError, match="amber_nonsense"):
        load_settings()
    monkeypatch.delenv("amber_nonsense")
    monkeypatch.setenv("AMBER_APP", "myapp:app")  # not a setting, but known
    monkeypatch.setenv("NOT_AMBER_X", "1")
    assert load_settings().prefix


def test_every_variable_is_documented_in_the_readme() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    for name in known_variables():
        assert f"`{name}`" in section, name


@pytest.mark.parametrize(
    ("given", "variable"),
    [
        ({"prefix": "a*b"}, "AMBER_PREFIX"),
        ({"prefix": "x" * 129}, "AMBER_PREFIX"),
        ({"redis_url": "redis://h\x00"}, "AMBER_REDIS_URL"),
        ({"database_url": "postgresql://\ud800"}, "AMBER_DATABASE_URL"),
        ({"database_url": "p" * 5000}, "AMBER_DATABASE_URL"),
        ({"data_dir": "a\x00b"}, "AMBER_DATA_DIR"),
        ({"data_dir": "\ud800"}, "AMBER_DATA_DIR"),
        ({"connect_timeout": float("inf")}, "AMBER_CONNECT_TIMEOUT"),
        ({"connect_timeout": float("nan")}, "AMBER_CONNECT_TIMEOUT"),
        ({"command_timeout": 0}, "AMBER_COMMAND_TIMEOUT"),
        ({"active_ttl": 10**20}, "AMBER_ACTIVE_TTL"),
        ({"max_retries": 2**31}, "AMBER_MAX_RETRIES"),
    ],
)
def test_malformed_values_name_the_variable(given: dict[str, object], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_settings(**given)


def test_timeouts() -> None:
    cfg = load_settings()
    assert cfg.connect_timeout == defaults.CONNECT_TIMEOUT == 1.0
    assert cfg.command_timeout == defaults.COMMAND_TIMEOUT >= 10
    assert load_settings(command_timeout=0.5, connect_timeout=0.25).command_timeout == 0.5


def test_unknown_setting_given_as_none_is_refused_too() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'prefx'"):
        load_settings(prefx=None)
