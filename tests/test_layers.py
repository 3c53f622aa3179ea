"""The package's imports go one way, down a ladder (docs/DESIGN in README's layout).

Read with ``ast`` over ``src/amber``: eager imports only (those under ``TYPE_CHECKING``
and inside functions are not run when a module loads). Importing a submodule runs its
package's ``__init__`` first, so that edge counts too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "amber"

LADDER = [
    {"errors", "keys", "codec", "config", "defaults", "observe", "redis_url", "lazy", "lru"},
    {"engines"},
    {"schema", "wal"},
    {"memory"},
    {"checkpoints"},
    {"agents", "runtime", "pause"},
    {"stack"},
    {"langgraph", "persistence", "cli", "web", "examples", "demo"},
]
"""Each rung imports only rungs at or below it."""

SHIMS = {
    "amber.agents.coordinator",
    "amber.pause.manager",
    "amber.checkpoints.leases",
    "amber.checkpoints.analyses",
    "amber.engines.stack",
}
"""Modules left where a public name used to live: they only re-export it from above."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _eager(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements that run at import, ``if TYPE_CHECKING:`` blocks left out."""
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += node.orelse
        elif isinstance(node, ast.Try):
            out += node.body + node.orelse + node.finalbody
        else:
            out.append(node)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _eager(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                if target not in modules:
                    continue
                parts = target.split(".")
                for i in range(2, len(parts) + 1):  # a package's __init__ runs first
                    dep = ".".join(parts[:i])
                    if dep != name and not name.startswith(dep + "."):
                        edges[name].add(dep)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def _rung(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, rung in enumerate(LADDER):
        if top in rung:
            return i
    raise AssertionError(f"{module} is on no rung of the ladder: add it to LADDER")


def test_no_module_imports_itself_back() -> None:
    assert _cycles(_graph()) == []


def test_packages_import_only_down_the_ladder() -> None:
    wrong = [
        f"{m} → {d}"
        for m, deps in _graph().items()
        for d in deps
        if m != "amber" and d != "amber" and m not in SHIMS and _rung(d) > _rung(m)
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "never"),
    [
        ("amber.langgraph", ("runtime", "pause", "agents", "web", "cli", "examples")),
        ("amber.persistence", ("memory", "checkpoints", "runtime", "pause", "agents")),
    ],
)
def test_an_integration_loads_only_what_it_uses(module: str, never: tuple[str, ...]) -> None:
    code = (
        f"import sys, {module}\nprint('\\n'.join(m for m in sys.modules if m.startswith('amber.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    loaded = sorted(m for m in out if m.split(".")[1] in never)
    assert loaded == []


def test_no_file_is_over_500_lines() -> None:
    """A file has one job; past 500 lines it has grown a second one."""
    long = {
        str(p.relative_to(SRC)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}
