"""Small real LangGraph graphs for the tests, also runnable in a child process.

Every node appends its name to a log file opened with O_APPEND (one write per line,
so lines from killed processes are whole), which is how the tests count executions.

    python -m tests.langgraph.graphs review THREAD LOG start
    python -m tests.langgraph.graphs review THREAD LOG resume ANSWER
    python -m tests.langgraph.graphs steps THREAD LOG RELEASE_FILE

Children use ``AmberSaver.from_env()``: the ``AMBER_*`` variables the suite sets.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


def record(log: str | Path, name: str) -> None:
    """Append one line to the execution log, in one write."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
    finally:
        os.close(fd)


def executions(log: str | Path) -> list[str]:
    """Every line of the execution log, in order."""
    path = Path(log)
    return path.read_text().splitlines() if path.exists() else []


class Review(TypedDict):
    text: str
    log: Annotated[list[str], operator.add]


def review_graph(log: str | Path) -> StateGraph[Review]:
    """draft -> review (asks a human with ``interrupt``) -> publish."""

    def draft(state: Review) -> dict[str, Any]:
        record(log, "draft")
        return {"text": "draft v1", "log": ["draft"]}

    def review(state: Review) -> dict[str, Any]:
        record(log, "review")  # a node that interrupts runs again from its start on resume
        answer = interrupt({"question": "publish?", "text": state["text"]})
        return {"text": f"{state['text']} ({answer})", "log": ["review"]}

    def publish(state: Review) -> dict[str, Any]:
        record(log, "publish")
        return {"log": ["publish"]}

    graph = StateGraph(Review)
    graph.add_node("draft", draft)
    graph.add_node("review", review)
    graph.add_node("publish", publish)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "review")
    graph.add_edge("review", "publish")
    graph.add_edge("publish", END)
    return graph


class Steps(TypedDict):
    results: Annotated[list[str], operator.add]


def steps_graph(log: str | Path, release: str | Path) -> StateGraph[Steps]:
    """a -> (fast, slow in one super-step) -> last. ``slow`` waits until ``release`` exists."""

    def a(state: Steps) -> dict[str, Any]:
        record(log, "a")
        return {"results": ["a"]}

    def fast(state: Steps) -> dict[str, Any]:
        record(log, "fast")
        return {"results": ["fast"]}

    def slow(state: Steps) -> dict[str, Any]:
        record(log, "slow-start")
        while not Path(release).exists():
            time.sleep(0.02)
        record(log, "slow")
        return {"results": ["slow"]}

    def last(state: Steps) -> dict[str, Any]:
        record(log, "last")
        return {"results": ["last"]}

    graph = StateGraph(Steps)
    for name, node in (("a", a), ("fast", fast), ("slow", slow), ("last", last)):
        graph.add_node(name, node)
    graph.add_edge(START, "a")
    graph.add_edge("a", "fast")
    graph.add_edge("a", "slow")
    graph.add_edge(["fast", "slow"], "last")
    graph.add_edge("last", END)
    return graph


def main(argv: list[str]) -> None:
    from amber.langgraph import AmberSaver

    kind, thread, log = argv[:3]
    config: Any = {"configurable": {"thread_id": thread}}
    with AmberSaver.from_env() as saver:
        if kind == "review":
            graph = review_graph(log).compile(checkpointer=saver)
            arg = {"text": "", "log": []} if argv[3] == "start" else Command(resume=argv[4])
            out = graph.invoke(arg, config, durability="sync")
            interrupts = [i.value for i in out.pop("__interrupt__", [])]
            print(json.dumps({"state": out, "interrupts": interrupts}), flush=True)
        elif kind == "steps":
            graph = steps_graph(log, argv[3]).compile(checkpointer=saver)
            state = graph.get_state(config)
            arg = None if state.next else {"results": []}
            out = graph.invoke(arg, config, durability="sync")
            print(json.dumps(out), flush=True)
        else:
            raise SystemExit(f"unknown graph {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
