"""The three analysts of DD-011, doing small real computations on the sample data.

Every API response goes through ``BaseAgent.fetch`` (cached in working memory),
and each subtask keeps its working notes in L1, so a resumed analyst repeats no
call and no finished computation.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

import orjson

from amber.agents.base import ApiClient, BaseAgent
from amber.examples.market import MarketDataClient
from amber.memory.working import AgentMemory

YEARS = tuple(range(2015, 2025))


def _pct(x: float) -> float:
    return round(x, 4)


class ExampleAnalyst(BaseAgent):
    """An analyst on the sample market data: without a ``market`` it gets its own client."""

    def __init__(
        self,
        analysis_id: str,
        stock_ticker: str,
        l1_cache: AgentMemory,
        market: ApiClient | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(analysis_id, stock_ticker, l1_cache, market or MarketDataClient(), config)


class FinancialAnalyst(ExampleAnalyst):
    """Parses filings, computes ratios, compares with peers, flags red flags."""

    agent_type = "financial_analyst"
    version = "1.0"
    subtasks = ("10k_parsing", "ratio_calculation", "peer_comparison", "red_flag_detection")

    def run_subtask(self, name: str) -> Any:
        """Run one of the four subtasks."""
        t = self.stock_ticker
        statements: dict[str, Any]
        if name == "10k_parsing":
            statements = {}
            for year in YEARS:
                filing = self.fetch("sec_edgar", "10k", ticker=t, year=year)
                statements[str(year)] = filing
                self.l1_cache.hset("parsed_10k", str(year), orjson.dumps(filing))
            return {
                "years": len(statements),
                "latest_revenue": statements[str(YEARS[-1])]["revenue"],
            }
        statements = {
            k.decode(): orjson.loads(v) for k, v in self.l1_cache.hgetall("parsed_10k").items()
        }
        if not statements:  # working memory lost with no snapshot: re-derive from filings
            statements = {str(y): self.fetch("sec_edgar", "10k", ticker=t, year=y) for y in YEARS}
        if name == "ratio_calculation":
            ratios = {}
            for yr, s in sorted(statements.items()):
                ratios[yr] = {
                    "gross_margin_proxy": _pct(s["operating_income"] / s["revenue"]),
                    "net_margin": _pct(s["net_income"] / s["revenue"]),
                    "roe": _pct(s["net_income"] / s["total_equity"]),
                    "roa": _pct(s["net_income"] / s["total_assets"]),
                    "current_ratio": _pct(s["current_assets"] / s["current_liabilities"]),
                    "debt_to_equity": _pct(s["total_debt"] / s["total_equity"]),
                }
            with self.l1_cache.batch(defer=True) as b:  # to Redis with the step's checkpoint
                b.set("ratio_table", orjson.dumps(ratios))
            return ratios[str(YEARS[-1])]
        latest = self.interim_results["ratio_calculation"]
        if name == "peer_comparison":
            matrix = {}
            for peer in ("MSFT", "GOOGL", "AMZN", "META"):
                p = self.fetch("bloomberg", "peer_ratios", peer=peer)
                matrix[peer] = {
                    "operating_margin_gap": _pct(
                        latest["gross_margin_proxy"] - p["operating_margin"]
                    ),
                    "roe_gap": _pct(latest["roe"] - p["roe"]),
                }
            with self.l1_cache.batch(defer=True) as b:
                b.set("comparison_matrix", orjson.dumps(matrix))
            return matrix
        if name == "red_flag_detection":
            ratios = orjson.loads(self.l1_cache.get("ratio_table") or b"{}")
            years = sorted(ratios)
            flags = []
            if ratios and ratios[years[-1]]["current_ratio"] < 1.0:
                flags.append("current ratio below 1.0")
            if ratios and ratios[years[-1]]["debt_to_equity"] > ratios[years[0]]["debt_to_equity"]:
                flags.append("leverage rose over the decade")
            return {"red_flags": flags, "count": len(flags)}
        raise ValueError(f"unknown subtask {name!r}")


class StrategyAnalyst(ExampleAnalyst):
    """Historical ROI, M&A review, management compensation, capital allocation score."""

    agent_type = "strategy_analyst"
    version = "1.0"
    subtasks = ("historical_roi", "ma_review", "mgmt_compensation", "capital_allocation_scoring")

    def run_subtask(self, name: str) -> Any:
        """Run one of the four subtasks."""
        t = self.stock_ticker
        if name == "historical_roi":
            self.l1_cache.delete(f"{t.lower()}_historical_roi")  # a rerun starts the list afresh
            for year in YEARS:
                f = self.fetch("koyfin", "financials", ticker=t, year=year)
                invested = f["total_equity"] + f["total_debt"] - f["cash"]
                self.l1_cache.rpush(
                    f"{t.lower()}_historical_roi", _pct(f["operating_income"] * 0.84 / invested)
                )
            series = [float(x) for x in self.l1_cache.lrange(f"{t.lower()}_historical_roi", 0, -1)]
            return {"roic": series, "mean": _pct(mean(series))}
        if name == "ma_review":
            deals = []
            for year in YEARS:  # one call per year: the quota-hungry part
                for deal in self.fetch("koyfin", "acquisitions", ticker=t, year=year):
                    deals.append({"year": year, **deal})
                self.l1_cache.set("ma_review:last_year_reviewed", year)
            total = round(sum(d["price"] for d in deals), 3)
            with self.l1_cache.batch(defer=True) as b:
                b.set("ma_review:total_spend", total)
            return {
                "deals": len(deals),
                "total_spend": total,
                "largest": max(deals, key=lambda d: d["price"])["target"] if deals else None,
            }
        if name == "mgmt_compensation":
            rows = {y: self.fetch("koyfin", "compensation", ticker=t, year=y) for y in YEARS}
            pay = [rows[y]["ceo_total"] for y in YEARS]
            tsr = [rows[y]["tsr"] for y in YEARS]
            aligned = sum(1 for i in range(1, len(YEARS)) if (pay[i] - pay[i - 1]) * tsr[i] >= 0)
            self.l1_cache.zadd("pay_by_year", {str(y): rows[y]["ceo_total"] for y in YEARS})
            return {"pay_growth": _pct(pay[-1] / pay[0] - 1), "aligned_years": aligned}
        if name == "capital_allocation_scoring":
            roic = self.interim_results["historical_roi"]["mean"]
            ma = self.interim_results["ma_review"]["total_spend"]
            comp = self.interim_results["mgmt_compensation"]["aligned_years"]
            score = min(
                1.0,
                0.5 * min(roic / 0.3, 1.0)
                + 0.3 * (1 if ma < 5 else 0.5)
                + 0.2 * comp / (len(YEARS) - 1),
            )
            with self.l1_cache.batch(defer=True) as b:
                b.set("capital_allocation_score", round(score, 2))
            return {"final_score": round(score, 2)}
        raise ValueError(f"unknown subtask {name!r}")


class ValuationAgent(ExampleAnalyst):
    """A discounted cash flow valuation in five steps."""

    agent_type = "valuation_agent"
    version = "1.0"
    subtasks = (
        "dcf_assumptions",
        "cash_flow_projection",
        "wacc_calculation",
        "terminal_value",
        "sensitivity_analysis",
    )

    def _fcf(self, f: dict[str, float]) -> float:
        return f["operating_cash_flow"] - f["capex"]

    def run_subtask(self, name: str) -> Any:
        """Run one of the five subtasks."""
        t, r = self.stock_ticker, self.interim_results
        if name == "dcf_assumptions":
            hist = [self.fetch("bloomberg", "financials", ticker=t, year=y) for y in YEARS[-5:]]
            growth = (hist[-1]["revenue"] / hist[0]["revenue"]) ** (1 / 4) - 1
            margin = mean(self._fcf(f) / f["revenue"] for f in hist)
            self.l1_cache.hset("assumptions", mapping={"growth": growth, "fcf_margin": margin})
            return {
                "growth": _pct(growth),
                "fcf_margin": _pct(margin),
                "base_revenue": hist[-1]["revenue"],
                "terminal_growth": 0.025,
            }
        if name == "cash_flow_projection":
            a = r["dcf_assumptions"]
            fcf = [
                round(a["base_revenue"] * (1 + a["growth"]) ** n * a["fcf_margin"], 2)
                for n in range(1, 6)
            ]
            self.l1_cache.delete("fcf_model")  # a rerun starts the list afresh
            self.l1_cache.rpush("fcf_model", *fcf)
            return {"fcf": fcf}
        if name == "wacc_calculation":
            m = self.fetch("bloomberg", "market", ticker=t)
            latest = self.fetch("bloomberg", "financials", ticker=t, year=YEARS[-1])
            equity, debt = m["market_cap"], latest["total_debt"]
            ke = m["risk_free"] + m["beta"] * m["equity_risk_premium"]
            kd = m["pre_tax_cost_of_debt"] * (1 - m["tax_rate"])
            wacc = (equity * ke + debt * kd) / (equity + debt)
            with self.l1_cache.batch(defer=True) as b:
                b.set("wacc", wacc)
            return {
                "wacc": _pct(wacc),
                "cost_of_equity": _pct(ke),
                "net_debt": debt - latest["cash"],
            }
        if name == "terminal_value":
            return {"terminal_value": round(self._tv(r["wacc_calculation"]["wacc"], 0.025), 1)}
        if name == "sensitivity_analysis":
            table = {}
            for w in (-0.01, 0.0, 0.01):
                for g in (0.015, 0.025, 0.035):
                    wacc = r["wacc_calculation"]["wacc"] + w
                    table[f"wacc={wacc:.3f},g={g:.3f}"] = round(self._equity_value(wacc, g), 1)
            self.l1_cache.hset("scenario_table", mapping=table)
            base = self._equity_value(r["wacc_calculation"]["wacc"], 0.025)
            return {"scenarios": table, "base_equity_value": round(base, 1)}
        raise ValueError(f"unknown subtask {name!r}")

    def _tv(self, wacc: float, g: float) -> float:
        last = self.interim_results["cash_flow_projection"]["fcf"][-1]
        return float(last * (1 + g) / (wacc - g))

    def _equity_value(self, wacc: float, g: float) -> float:
        fcf = self.interim_results["cash_flow_projection"]["fcf"]
        pv = sum(f / (1 + wacc) ** (n + 1) for n, f in enumerate(fcf))
        pv_tv = self._tv(wacc, g) / (1 + wacc) ** len(fcf)
        return float(pv + pv_tv - self.interim_results["wacc_calculation"]["net_debt"])


ANALYSTS: tuple[type[BaseAgent], ...] = (FinancialAnalyst, StrategyAnalyst, ValuationAgent)
