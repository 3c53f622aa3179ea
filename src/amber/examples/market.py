"""A market-data client over the shipped sample data that behaves like a paid API.

Every call is counted in a ledger keyed by (provider, endpoint, parameters), so
duplicate work is measurable; each provider may have a call quota, and a call
past it raises ``QuotaExceeded`` like a real rate-limited API.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from importlib import resources
from typing import Any

from amber.errors import NotFound, QuotaExceeded
from amber.keys import call_key


@cache
def sample_data() -> dict[str, Any]:
    """The illustrative financial data shipped with amber."""
    text = resources.files("amber.examples").joinpath("data/financials.json").read_text()
    return dict(json.loads(text))


class MarketDataClient:
    """Serves sample data per provider, with quotas and a ledger of every call."""

    def __init__(
        self, quotas: dict[str, int] | None = None, data: dict[str, Any] | None = None
    ) -> None:
        self.data = data or sample_data()
        self.quotas: dict[str, int] = dict(quotas or {})
        self.ledger: Counter[str] = Counter()
        self.used: Counter[str] = Counter()

    @property
    def calls_made(self) -> int:
        """Every call that reached the provider."""
        return sum(self.ledger.values())

    @property
    def duplicate_calls(self) -> int:
        """Calls that repeated an earlier identical call."""
        return sum(n - 1 for n in self.ledger.values() if n > 1)

    def set_quota(self, provider: str, calls: int | None) -> None:
        """Allow ``calls`` more calls to ``provider`` (None: unlimited)."""
        self.used[provider] = 0
        if calls is None:
            self.quotas.pop(provider, None)
        else:
            self.quotas[provider] = calls

    def fetch(self, provider: str, endpoint: str, **params: Any) -> Any:
        """One API call; raises ``QuotaExceeded`` past the provider's quota."""
        limit = self.quotas.get(provider)
        if limit is not None and self.used[provider] >= limit:
            raise QuotaExceeded(
                f"{provider} quota of {limit} calls is exhausted",
                provider=provider,
                endpoint=endpoint,
            )
        self.used[provider] += 1
        self.ledger[call_key(provider, endpoint, params)] += 1
        return self._serve(endpoint, params)

    def _serve(self, endpoint: str, p: dict[str, Any]) -> Any:
        try:
            if endpoint == "peer_ratios":
                return self.data["peers"][p["peer"]]
            company = self.data[p["ticker"]]
            if endpoint in ("10k", "financials"):
                return company["annual"][str(p["year"])]
            if endpoint == "acquisitions":
                return company["acquisitions"].get(str(p["year"]), [])
            if endpoint == "compensation":
                return company["compensation"][str(p["year"])]
            if endpoint == "market":
                return company["market"]
        except KeyError as exc:
            raise NotFound(f"no sample data for {endpoint} {p}: missing {exc}") from None
        raise NotFound(f"unknown endpoint {endpoint!r}")
