"""Errors carry their context and pickle; settings come from the environment."""

from __future__ import annotations

import pickle

import pytest

from amber import AmberError, CheckpointNotFound, ConfigError, Durability, NotFound, defaults
from amber.config import load_settings


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
