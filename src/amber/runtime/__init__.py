"""The runtime: an application's agents by name, durable steps, reviews, and workers.

app = amber.App("research")

@app.agent
def summarise(ctx):
    return ctx.step("count", len, ctx.input["text"])

with amber.connect() as stack:
    analysis_id = app.submit(stack, [summarise], {"text": "..."})
    app.run(stack, analysis_id)          # or: amber worker --app mymodule:app
"""

from amber.runtime.app import App, FunctionAgent, load_app
from amber.runtime.reviews import Decision, Review, Reviews
from amber.runtime.steps import Intent, Retry, StepIntents
from amber.runtime.worker import Worker, WorkerStats

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
