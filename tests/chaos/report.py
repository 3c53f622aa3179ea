"""What a chaos run counted, and its table."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

KILL_ROWS = (
    ("subtask", "kills: during a subtask"),
    ("commit", "kills: around a PostgreSQL commit, before its Redis write"),
    ("pause", "kills: during a pause"),
    ("recovery", "kills: during resume-recovery"),
    ("other", "kills: before the first subtask (connect, build agents)"),
)

FAILURE_ROWS = (
    ("reexecuted", "re-executions of committed subtasks"),
    ("duplicate_calls", "duplicate calls (beyond those in flight at a kill or a Redis loss)"),
    ("stuck", "stuck analyses"),
    ("wrong_results", "completed analyses with results unlike an uninterrupted run"),
    ("failed", "analyses failed"),
    ("hung", "children hung (killed after the timeout)"),
)
"""Every count here must be 0."""


def measure_table(rows: list[tuple[str, str]]) -> list[str]:
    """(measure, value) rows as the lines of a markdown table."""
    width = max(len(label) for label, _ in rows)
    lines = [f"| {'measure':<{width}} | value |", f"|{'-' * (width + 2)}|------:|"]
    return lines + [f"| {label:<{width}} | {value:>5} |" for label, value in rows]


@dataclass
class AnalysisCounts:
    """The counts of one analysis, recomputed from its whole ledger after each round."""

    kills: Counter[str] = field(default_factory=Counter)
    reexecuted: int = 0
    duplicate_calls: int = 0
    """Repeats beyond the excused ones."""
    all_repeats: int = 0
    """Every repeat of a call key, excused or not."""
    calls: int = 0
    rollbacks: int = 0
    """Agents rolled back after a Redis loss took their newest memory (hybrid only)."""
    rerun: int = 0
    """Subtasks those rollbacks ran again, reported as such."""


@dataclass
class Tally:
    """A run's counts; ``ok`` when every failure count is 0."""

    seed: int
    rounds_planned: int
    replay_args: str = ""
    """Options beyond --rounds and --seed that the replay command needs."""
    rounds: int = 0
    analyses: dict[str, AnalysisCounts] = field(default_factory=dict)
    modes: Counter[str] = field(default_factory=Counter)
    redis_flush: int = 0
    redis_restart: int = 0
    pause_races: int = 0
    takeovers: int = 0
    """Resumes that took over a running analysis whose runner had died."""
    completed: int = 0
    stuck: int = 0
    wrong_results: int = 0
    failed: int = 0
    hung: int = 0
    child_errors: Counter[str] = field(default_factory=Counter)
    """Children that exited with an exception, by exception type (not failures by themselves)."""
    failures: list[str] = field(default_factory=list)
    """What went wrong, each line naming its round and analysis."""

    @property
    def kills(self) -> Counter[str]:
        """Kills by phase, over every analysis."""
        total: Counter[str] = Counter()
        for counts in self.analyses.values():
            total.update(counts.kills)
        return total

    @property
    def reexecuted(self) -> int:
        """Starts of subtasks whose completion had committed."""
        return sum(c.reexecuted for c in self.analyses.values())

    @property
    def duplicate_calls(self) -> int:
        """Repeated calls beyond the one in flight per interrupted child."""
        return sum(c.duplicate_calls for c in self.analyses.values())

    @property
    def rollbacks(self) -> int:
        """Agents rolled back, reported on their analysis's timeline (hybrid only)."""
        return sum(c.rollbacks for c in self.analyses.values())

    @property
    def rerun(self) -> int:
        """Subtasks run again by the reported rollbacks."""
        return sum(c.rerun for c in self.analyses.values())

    @property
    def calls(self) -> int:
        """Every market call made during the rounds."""
        return sum(c.calls for c in self.analyses.values())

    def failure_counts(self) -> dict[str, int]:
        """Each invariant's count; all must be 0."""
        return {name: int(getattr(self, name)) for name, _ in FAILURE_ROWS}

    @property
    def ok(self) -> bool:
        """No invariant broken and nothing else went wrong."""
        return not self.failures and not any(self.failure_counts().values())

    def rows(self) -> list[tuple[str, str]]:
        """(measure, value) pairs, in table order."""
        kills = self.kills
        rows = [("rounds", str(self.rounds))]
        rows += [(label, str(kills[phase])) for phase, label in KILL_ROWS]
        rows += [
            ("Redis losses: flush", str(self.redis_flush)),
            ("Redis losses: restart", str(self.redis_restart)),
            ("pause races", str(self.pause_races)),
            ("takeovers of a running analysis whose runner died", str(self.takeovers)),
            ("analyses started", str(len(self.analyses))),
            ("analyses completed", str(self.completed)),
            ("market calls", str(self.calls)),
            ("rollbacks reported (hybrid, after a Redis loss)", str(self.rollbacks)),
            ("subtasks those rollbacks ran again", str(self.rerun)),
        ]
        rows += [(label, str(getattr(self, name))) for name, label in FAILURE_ROWS]
        rows.append(("seed", str(self.seed)))
        return rows

    def table(self) -> str:
        """A markdown table, with the replay command and any failures under it."""
        lines = measure_table(self.rows())
        extra = f" {self.replay_args}" if self.replay_args else ""
        lines.append("")
        lines.append(
            f"replay: python -m tests.chaos.rounds --rounds {self.rounds_planned}"
            f" --seed {self.seed}{extra}"
        )
        modes = ", ".join(f"{m} {n}" for m, n in sorted(self.modes.items()))
        if modes:
            lines.append(f"analyses by mode: {modes}")
        if self.child_errors:
            errors = ", ".join(f"{t} {n}" for t, n in sorted(self.child_errors.items()))
            lines.append(f"children that raised: {errors}")
        lines += [f"FAILED: {f}" for f in self.failures[:50]]
        if len(self.failures) > 50:
            lines.append(f"... and {len(self.failures) - 50} more failures")
        return "\n".join(lines)
