"""Real LangGraph graphs on AmberSaver: a human review across two processes, a run
SIGKILLed mid super-step and resumed by another process, subgraphs, time travel."""

from __future__ import annotations

import json
import operator
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import amber
from amber.langgraph import AmberSaver, AsyncAmberSaver

from .graphs import executions, record, steps_graph

ROOT = Path(__file__).resolve().parents[2]
ID = Callable[[str], str]


def child(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph.graphs", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> Any:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.splitlines()[-1])


def test_a_review_interrupts_the_process_exits_and_a_new_process_resumes(
    saver: AmberSaver, uid: ID, tmp_path: Path
) -> None:
    thread, log = uid("review"), tmp_path / "executions.log"
    first = finish(child("review", thread, str(log), "start"))
    assert first["interrupts"] == [{"question": "publish?", "text": "draft v1"}]
    waiting = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert waiting is not None and any(w[1] == "__interrupt__" for w in waiting.pending_writes)
    second = finish(child("review", thread, str(log), "resume", "approved"))
    assert second["state"] == {"text": "draft v1 (approved)", "log": ["draft", "review", "publish"]}
    # draft had committed: it never ran again; review runs again by design when resumed
    assert executions(log) == ["draft", "review", "review", "publish"]


def test_a_run_killed_mid_step_resumes_without_rerunning_what_had_committed(
    saver: AmberSaver, uid: ID, tmp_path: Path
) -> None:
    thread, log, release = uid("steps"), tmp_path / "executions.log", tmp_path / "release"
    proc = child("steps", thread, str(log), str(release))
    config: Any = {"configurable": {"thread_id": thread}}
    deadline = time.monotonic() + 60
    while True:  # until "fast" finished and its writes are committed, "slow" still running
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, executions(log)
        tup = saver.get_tuple(config)
        # fast's own write: the checkpoint before a's super-step has a's "results" write
        # pending, which a read taken just before slow started would see
        done = {(w[1], str(w[2])) for w in tup.pending_writes or []} if tup else set()
        if "slow-start" in executions(log) and ("results", "['fast']") in done:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert "slow" not in executions(log)
    release.touch()
    out = finish(child("steps", thread, str(log), str(release)))
    assert sorted(out["results"]) == ["a", "fast", "last", "slow"]
    ran = Counter(executions(log))
    assert ran == {"a": 1, "fast": 1, "slow-start": 2, "slow": 1, "last": 1}


class Outer(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


class Inner(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


async def test_subgraph_state_interrupts_and_resumes_in_its_namespace(
    stack: amber.Stack, uid: ID, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"

    def research(state: Inner) -> dict[str, Any]:
        record(log, "research")
        return {"notes": [f"facts on {state['topic']}"]}

    def check(state: Inner) -> dict[str, Any]:
        record(log, "check")
        verdict = interrupt({"notes": state["notes"]})
        return {"notes": [f"checked: {verdict}"]}

    inner = StateGraph(Inner)
    inner.add_node("research", research)
    inner.add_node("check", check)
    inner.add_edge(START, "research")
    inner.add_edge("research", "check")
    inner.add_edge("check", END)

    def plan(state: Outer) -> dict[str, Any]:
        record(log, "plan")
        return {"notes": ["plan"]}

    def write(state: Outer) -> dict[str, Any]:
        record(log, "write")
        return {"notes": ["written"]}

    outer = StateGraph(Outer)
    outer.add_node("plan", plan)
    outer.add_node("team", inner.compile())
    outer.add_node("write", write)
    outer.add_edge(START, "plan")
    outer.add_edge("plan", "team")
    outer.add_edge("team", "write")
    outer.add_edge("write", END)
    saver = AsyncAmberSaver(stack)
    graph = outer.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": uid("sub")}}
    out = await graph.ainvoke({"topic": "amber", "notes": []}, config)
    assert out["__interrupt__"][0].value == {"notes": ["plan", "facts on amber"]}
    state = await graph.aget_state(config, subgraphs=True)
    sub = state.tasks[0].state
    assert state.next == ("team",) and sub is not None and sub.next == ("check",)
    namespaces = {
        t.config["configurable"]["checkpoint_ns"] async for t in saver.alist(config)
    }  # every namespace of the thread
    assert "" in namespaces and any(ns.startswith("team:") for ns in namespaces)
    out = await graph.ainvoke(Command(resume="ok"), config)
    assert out["notes"] == ["plan", "plan", "facts on amber", "checked: ok", "written"]
    assert Counter(executions(log)) == {"plan": 1, "research": 1, "check": 2, "write": 1}


class Count(TypedDict):
    n: int
    trail: Annotated[list[str], operator.add]


def test_time_travel_replays_and_forks_from_an_earlier_checkpoint(
    saver: AmberSaver, uid: ID, tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"

    def node(name: str, add: int) -> Callable[[Count], dict[str, Any]]:
        def run(state: Count) -> dict[str, Any]:
            record(log, name)
            return {"n": state["n"] + add, "trail": [name]}

        return run

    graph_def = StateGraph(Count)
    for name, add in (("a", 1), ("b", 10), ("c", 100)):
        graph_def.add_node(name, node(name, add))
    graph_def.add_edge(START, "a")
    graph_def.add_edge("a", "b")
    graph_def.add_edge("b", "c")
    graph_def.add_edge("c", END)
    graph = graph_def.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": uid("travel")}}
    assert graph.invoke({"n": 0, "trail": []}, config)["n"] == 111
    history = list(graph.get_state_history(config))
    assert [h.next for h in history] == [(), ("c",), ("b",), ("a",), ("__start__",)]
    before_b = history[2]
    assert before_b.values == {"n": 1, "trail": ["a"]}

    replayed = graph.invoke(None, before_b.config)  # replay b and c from there
    assert replayed == {"n": 111, "trail": ["a", "b", "c"]}
    forked_config = graph.update_state(before_b.config, {"n": 5})  # fork with an edit
    assert graph.invoke(None, forked_config) == {"n": 115, "trail": ["a", "b", "c"]}
    assert Counter(executions(log)) == {"a": 1, "b": 3, "c": 3}
    history = list(graph.get_state_history(config))
    # newest first: the edited fork and its run, the replay (LangGraph copies the chosen
    # checkpoint as a "fork", then runs b and c), the first run
    sources = [h.metadata["source"] for h in history if h.metadata]
    assert sources == ["loop", "loop", "update", "loop", "loop", "fork"] + ["loop"] * 4 + ["input"]
    chosen = before_b.config["configurable"]["checkpoint_id"]
    for branch in (history[2], history[5]):
        assert branch.parent_config is not None
        assert branch.parent_config["configurable"]["checkpoint_id"] == chosen


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_every_durability_mode_runs_to_the_same_state(
    saver: AmberSaver, uid: ID, tmp_path: Path, durability: Any
) -> None:
    release = tmp_path / "release"
    release.touch()
    graph = steps_graph(tmp_path / "log", release).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": uid("dur")}}
    out = graph.invoke({"results": []}, config, durability=durability)
    assert sorted(out["results"]) == ["a", "fast", "last", "slow"]
    assert graph.get_state(config).values == out
