"""The runtime: an application's agents by name, durable steps, reviews, and workers.

app = amber.App("research")

@app.agent
def summarise(ctx):
    return ctx.step("count", len, ctx.input["text"])

with amber.connect() as stack:
    analysis_id = app.submit(stack, [summarise], {"text": "..."})
    app.run(stack, analysis_id)          # or: amber worker --app mymodule:app
"""

from typing import TYPE_CHECKING

from amber.lazy import loader
from amber.runtime.reviews import Decision, Review, Reviews
from amber.runtime.steps import Intent, Retry, StepIntents

if TYPE_CHECKING:
    from amber.runtime.app import App, FunctionAgent, load_app
    from amber.runtime.worker import Worker, WorkerStats

_LATER = {
    **dict.fromkeys(["App", "FunctionAgent", "load_app"], "amber.runtime.app"),
    **dict.fromkeys(["Worker", "WorkerStats"], "amber.runtime.worker"),
}
"""The app shell, above the engine: loaded on first use."""

__all__ = [
    "App",
    "Decision",
    "FunctionAgent",
    "Intent",
    "Retry",
    "Review",
    "Reviews",
    "StepIntents",
    "Worker",
    "WorkerStats",
    "load_app",
]


__getattr__ = loader(__name__, _LATER, globals())
