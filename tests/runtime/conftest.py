"""Apps with names unique to one test: a queued analysis of one test is never claimed by
another test's worker."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

import amber


class Crash(BaseException):
    """Stands for the process dying inside a step: nothing after it runs, no handler
    of ``Exception`` catches it."""


@pytest.fixture
def new_app() -> Callable[[], amber.App]:
    def make() -> amber.App:
        return amber.App(f"t{uuid.uuid4().hex[:10]}")

    return make


@pytest.fixture
def name() -> Callable[[str], str]:
    """A unique agent name: ``name("fetcher")`` → ``fetcher_1a2b3c4d``."""

    def make(base: str) -> str:
        return f"{base}_{uuid.uuid4().hex[:8]}"

    return make
