"""The example analysts of DD-011, the market-data client they call and its sample data.

``amber demo`` runs them through the same public API a user has.
"""

from amber.examples.analysts import ANALYSTS, FinancialAnalyst, StrategyAnalyst, ValuationAgent
from amber.examples.market import MarketDataClient, sample_data
from amber.runtime.app import App

app = App("examples")
"""The example analysts as an application: ``amber worker --app amber.examples:app``."""
for _analyst in ANALYSTS:
    app.agent(_analyst)
STOCK_ANALYSIS = app.analysis("stock_analysis", ANALYSTS)
"""The three analysts together: ``app.submit(stack, "stock_analysis", ticker="AAPL")``."""

__all__ = [
    "ANALYSTS",
    "STOCK_ANALYSIS",
    "FinancialAnalyst",
    "MarketDataClient",
    "StrategyAnalyst",
    "ValuationAgent",
    "app",
    "sample_data",
]
