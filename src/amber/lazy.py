"""Names of a package that load their module on first use (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def loader(package: str, where: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name in ``where`` is imported from
    its module on first use and kept in ``namespace``, so importing the package never
    loads those modules (a package low on the import ladder re-exporting a name from
    above it, or ``amber`` keeping ``amber --help`` fast)."""

    def __getattr__(name: str) -> Any:
        if name in where:
            value = getattr(importlib.import_module(where[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
