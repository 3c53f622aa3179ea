"""Ids as the command line takes them: whole, or a unique prefix, as git takes commits.

A UUID may be given by its first 4 or more hex digits (hyphens optional); an agent id by
its first 4 or more characters. The lookups are thin methods over PostgreSQL
(``Analyses.ids_like`` and the like); what is pure (the prefix's form, the choice among
the matches) is here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from amber.errors import (
    AmbiguousId,
    AnalysisNotFound,
    CheckpointNotFound,
    InvalidIdentifier,
    NotFound,
    ReviewNotFound,
)
from amber.keys import check_id, check_uuid

if TYPE_CHECKING:
    from amber.stack import Stack

MIN_PREFIX = 4
"""Fewest characters of a prefix (hex digits, for a UUID)."""
SHOWN = 5
"""Candidates an ambiguous prefix names."""

_HEX = re.compile(r"[0-9a-f]+")
_HYPHENS = (8, 12, 16, 20)


def uuid_prefix(text: str, kind: str) -> str:
    """``text`` as a canonical UUID, or as the canonical start of one (lower case, hyphens
    where a UUID has them); ``InvalidIdentifier`` if it is neither."""
    digits = text.strip().lower().replace("-", "")
    if len(digits) == 32:
        return check_uuid(text, kind)
    if len(digits) < MIN_PREFIX or len(digits) > 32 or not _HEX.fullmatch(digits):
        raise InvalidIdentifier(
            f"{kind} is not a UUID or a prefix of one ({MIN_PREFIX} or more hex digits)",
            field=kind,
            value=text,
        )
    parts, start = [], 0
    for cut in (*_HYPHENS, 32):
        if start >= len(digits):
            break
        parts.append(digits[start:cut])
        start = cut
    return "-".join(parts)


def choose(prefix: str, found: list[str], kind: str, missing: Callable[[str], NotFound]) -> str:
    """The one match of ``prefix`` among ``found`` (at most ``SHOWN + 1`` of them)."""
    if prefix in found:
        return prefix
    if len(found) == 1:
        return found[0]
    if not found:
        raise missing(f"no {kind.removesuffix('_id')} id starts with {prefix!r}")
    names = ", ".join(found[:SHOWN]) + (", ..." if len(found) > SHOWN else "")
    raise AmbiguousId(f"{kind} prefix {prefix!r} is ambiguous: {names} (give more of it)")


def _resolve(
    text: str,
    kind: str,
    lookup: Callable[[str, int], list[str]],
    missing: Callable[[str], NotFound],
) -> str:
    prefix = uuid_prefix(text, kind)
    if len(prefix) == 36:  # whole: the command's own lookup says whether it exists
        return prefix
    return choose(prefix, lookup(prefix, SHOWN + 1), kind, missing)


def analysis_id(stack: Stack, text: str) -> str:
    """An analysis id given whole or by a unique prefix."""
    return _resolve(text, "analysis_id", stack.analyses.ids_like, AnalysisNotFound)


def analysis_filter(text: str | None) -> Callable[[Stack], str | None]:
    """A command's optional ``--analysis``: its prefix checked now, before anything
    connects; the returned function resolves it on a stack (None stays None)."""
    if text is None:
        return lambda stack: None
    uuid_prefix(text, "analysis_id")
    return lambda stack: analysis_id(stack, text)


def checkpoint_id(stack: Stack, text: str) -> str:
    """A checkpoint id given whole or by a unique prefix."""
    return _resolve(text, "checkpoint_id", stack.checkpointer.ids_like, CheckpointNotFound)


def review_id(stack: Stack, text: str) -> str:
    """A review given by its reference: an analysis's review id whole or by a unique
    prefix, a task's review as ``scope:id`` or by its id alone (``Reviews.get`` says if
    that id is in several scopes)."""
    try:
        return _resolve(text, "review_id", stack.reviews.ids_like, ReviewNotFound)
    except InvalidIdentifier:  # not a UUID's form: a task's review, looked up whole
        return text


def step_id(stack: Stack, text: str) -> str:
    """An at-most-once step's id given whole or by a unique prefix."""
    return _resolve(text, "step_id", stack.intents.ids_like, NotFound)


def agent_id(stack: Stack, text: str) -> str:
    """An agent id given whole or by a unique prefix of the id of an analysis's agent.

    An id no analysis names (working memory used on its own) is taken as it is.
    """
    text = check_id(text, "agent_id")
    found = stack.analyses.agent_ids_like(text, SHOWN + 1)
    if not found or len(text) < MIN_PREFIX:
        return text
    return choose(text, found, "agent_id", NotFound)
