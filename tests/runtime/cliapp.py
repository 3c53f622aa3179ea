"""The application the command-line tests load: ``--app tests.runtime.cliapp:app``.

Its agent names are its own (``cli_*``): a worker of this app never claims another
test's analysis. Every agent keeps its side effects in files its input names, so a test
can count calls made in another process.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import amber

app = amber.App("cli_tests")

NOT_AN_APP = {"name": "cli_tests"}
"""What ``--app tests.runtime.cliapp:NOT_AN_APP`` finds: a dict, not an ``amber.App``."""


def note(ledger: str | None, line: str) -> None:
    """Append ``line`` to the ledger file, when the input names one."""
    if ledger:
        with open(ledger, "a") as f:
            f.write(line + "\n")


def fetch_text(text: str, ledger: str | None) -> str:
    note(ledger, "fetch")
    return text


def count_words(text: str, ledger: str | None) -> int:
    note(ledger, "count")
    return len(text.split())


@app.agent(name="cli_summariser", steps=["fetch", "count"])
def cli_summariser(ctx: Any) -> dict[str, int]:
    """Two steps: fetch the text, count its words."""
    ledger = ctx.input.get("ledger")
    text = ctx.step("fetch", fetch_text, ctx.input.get("text", "one two three"), ledger)
    return {"words": ctx.step("count", count_words, text, ledger)}


SUMMARY = app.analysis("cli_summary", [cli_summariser])


def check_supplier(broken: str, ledger: str | None) -> str:
    note(ledger, "check")
    if Path(broken).exists():
        raise ConnectionError(f"supplier down ({broken} exists)")
    return "up"


@app.agent(name="cli_flaky")
def cli_flaky(ctx: Any) -> dict[str, str]:
    """Fails while the file ``input["broken"]`` exists; its first step runs once."""
    ledger = ctx.input.get("ledger")
    first = ctx.step("fetch", fetch_text, "kept", ledger)
    status = ctx.step("check", check_supplier, ctx.input["broken"], ledger, retry=amber.Retry(1))
    return {"first": first, "supplier": status}


FLAKY = app.analysis("cli_flaky", [cli_flaky])


def send_payment(marker: str, amount: int) -> str:
    """Pays, then (the first time, while ``marker`` does not exist) dies before amber
    can record that it did."""
    path = Path(marker)
    if not path.exists():
        path.write_text(f"paid {amount}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    return f"paid {amount} again"


@app.agent(name="cli_payer")
def cli_payer(ctx: Any) -> dict[str, Any]:
    """One at-most-once step: a payment that takes no idempotency key."""
    receipt = ctx.step(
        "pay", send_payment, ctx.input["marker"], ctx.input.get("amount", 100), at_most_once=True
    )
    return {"receipt": receipt}


PAYMENT = app.analysis("cli_payment", [cli_payer])


@app.agent(name="cli_publisher")
def cli_publisher(ctx: Any) -> dict[str, Any]:
    """Drafts, waits for a person's review, and returns the decision."""
    draft = ctx.step("draft", fetch_text, ctx.input.get("text", "draft"), ctx.input.get("ledger"))
    decision = ctx.wait_for_review("publish", {"draft": draft})
    return {"outcome": decision.outcome, "by": decision.by, "data": decision.data}


PUBLISH = app.analysis("cli_publish", [cli_publisher])
