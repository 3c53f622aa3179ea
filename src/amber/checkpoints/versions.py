"""Agent-version migrations of checkpoint records (DD-011 "Agent Version Compatibility").

Register one function per step; restore applies them in order until the record
reaches the agent's current version. A record newer than the code is refused.

    @amber.checkpoint_migration("strategy_analyst", "1.0", "1.1")
    def migrate_v1_0_to_v1_1(checkpoint: dict) -> dict:
        checkpoint.setdefault("subtask_progress",
                              {t: 1.0 for t in checkpoint["completed_subtasks"]})
        return checkpoint
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amber.errors import MigrationError, VersionTooNew

Doc = dict[str, Any]
MigrationFn = Callable[[Doc], Doc]


def parse_version(version: str) -> tuple[int, ...]:
    """'1.10' → (1, 10); raises ``MigrationError`` for anything else."""
    try:
        return tuple(int(p) for p in str(version).split("."))
    except ValueError:
        raise MigrationError(f"agent version {version!r} is not dotted numbers") from None


class CheckpointMigrations:
    """A registry of step functions per agent type: from version → (to version, fn)."""

    def __init__(self) -> None:
        self._steps: dict[str, dict[str, tuple[str, MigrationFn]]] = {}

    def register(
        self, agent_type: str, from_version: str, to_version: str, fn: MigrationFn
    ) -> MigrationFn:
        """Add a step; returns ``fn`` so it can be used as a decorator body."""
        if parse_version(to_version) <= parse_version(from_version):
            raise MigrationError(f"migration {from_version} → {to_version} does not go forward")
        self._steps.setdefault(agent_type, {})[from_version] = (to_version, fn)
        return fn

    def __call__(
        self, agent_type: str, from_version: str, to_version: str
    ) -> Callable[[MigrationFn], MigrationFn]:
        """Decorator form of :meth:`register`."""
        return lambda fn: self.register(agent_type, from_version, to_version, fn)

    def upgrade(self, doc: Doc, target: str) -> tuple[Doc, list[str]]:
        """Bring ``doc`` to ``target``; returns it and the versions it passed through."""
        agent_type, version = doc["agent_type"], str(doc["agent_version"])
        if parse_version(version) > parse_version(target):
            raise VersionTooNew(
                f"checkpoint was written by {agent_type} {version}; this code is {target}",
                agent_type=agent_type,
                record_version=version,
                code_version=target,
            )
        path: list[str] = []
        steps = self._steps.get(agent_type, {})
        while parse_version(version) < parse_version(target):
            if version not in steps:
                raise MigrationError(
                    f"no migration registered from {agent_type} {version} toward {target}",
                    agent_type=agent_type,
                    record_version=version,
                )
            path.append(version)
            version, fn = steps[version]
            doc = fn(dict(doc))
            doc["agent_version"] = version
        return doc, path


registry = CheckpointMigrations()
"""The process-wide registry; ``amber.checkpoint_migration`` is its decorator."""
checkpoint_migration = registry
