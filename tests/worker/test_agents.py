"""Agents on the rail with a real ``backlog-worker run --drain`` process: the store from python
and command executors, spawn + wait_for fan-in with ``ctx.upstream``, checkpoints across a
retried attempt, a human step, and every bad input (named, the run's other writes unaffected).

The rail is an embedded file, and (``served``) the same file behind a real ``tracker serve``.
The executors' code is written to a module in the test's directory (the worker imports it
through ``PYTHONPATH``); the test reads the rail back in process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.worker.daemonkit import TOKEN, clean_env, serve_tracker
from tracker_client.factory import open_tracker
from tracker_client.models import Event, RetryPolicy, TaskCreate, TaskDetail
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.timeout(180)

AGENTS = """
from plugins.api import Transition


async def planner(ctx):
    await ctx.store.put("memory", "topic", {"topic": ctx.task.title})
    ids = [
        await ctx.spawn("research", f"{ctx.task.title}: part {i}", metadata={"part": i})
        for i in (1, 2, 3)
    ]
    await ctx.report("spawned", {"ids": ids}, flush=True)
    return Transition("split", wait_for=ids)


async def researcher(ctx):
    topic = (await ctx.store.get("memory", "topic"))["topic"]
    part = ctx.task.metadata["part"]
    await ctx.store.put("memory", f"finding-{part}", {"text": f"finding {part} on {topic}"})
    await ctx.report("result", {"part": part, "topic": topic}, flush=True)
    return Transition("complete")


async def summariser(ctx):
    hits = await ctx.store.search("finding", namespace="memory")
    await ctx.report(
        "result",
        {
            "parts": sorted(u.result["part"] for u in ctx.upstream),
            "outcomes": sorted({u.outcome for u in ctx.upstream}),
            "hits": sorted(h.key for h in hits),
        },
        flush=True,
    )
    return Transition("summarised")


async def pywriter(ctx):
    await ctx.store.put("memory", "greeting", "hello from python")
    return Transition("written")


async def flaky(ctx):
    await ctx.report("attempt", {"n": ctx.attempt, "previous": ctx.previous_checkpoint}, flush=True)
    if ctx.attempt == 1:
        await ctx.checkpoint({"step": 1})
        await ctx.checkpoint({"step": 2})  # the latest wins
        raise RuntimeError("the first attempt fails")
    return Transition("complete")


async def drafter(ctx):
    return Transition("drafted")


async def publisher(ctx):
    await ctx.report("instructions", {"text": ctx.instructions}, flush=True)
    return Transition("published")


async def bad(ctx):
    case = ctx.task.metadata["case"]
    await ctx.report("before", {"case": case}, flush=True)
    await ctx.store.put("memory", f"ok-{case}", True)
    if case == "wait_for":
        return Transition("complete", wait_for=["no-such-task"])
    if case == "cycle":
        return Transition("complete", wait_for=[ctx.task.id])
    try:
        if case == "spawn":
            await ctx.spawn("no-such-pipeline", "child")
        elif case == "field":
            await ctx.spawn("research", "child", colour="red")
        elif case == "value":
            await ctx.store.put("memory", "bad-value", {1, 2})
        elif case == "checkpoint":
            if ctx.attempt == 1:
                await ctx.checkpoint({"blob": "x" * 70000})
    except Exception as exc:
        await ctx.report("refused", {"type": type(exc).__name__, "message": str(exc)}, flush=True)
    if case == "checkpoint":
        await ctx.report("previous", {"value": ctx.previous_checkpoint}, flush=True)
        if ctx.attempt == 1:
            raise RuntimeError("fail once: the next attempt sees no checkpoint")
    return Transition("complete")
"""

READER = """
import json, sys
json.dump({"store": {"memory": {"echo": sys.argv[1] + "!"}}}, open("outcome.json", "w"))
"""

FLAKY_COMMAND = """
import json, os, sys
if os.path.exists("checkpoint.json"):
    print("resumed from", json.load(open("checkpoint.json"))["step"])
else:
    json.dump({"step": "half"}, open("checkpoint.json", "w"))
    sys.exit(1)
"""


def _pipeline(states: dict[str, Any], *moves: tuple[str, str, str]) -> dict[str, Any]:
    transitions = [{"from": a, "to": b, "trigger": t} for a, b, t in moves]
    return {"initial": next(iter(states)), "states": states, "transitions": transitions}


def _roles(states: dict[str, Any]) -> list[str]:
    return [s["agent_role"] for s in states.values() if "agent_role" in s]


PIPELINES = {
    "plan": _pipeline(
        {
            "plan": {"agent_role": "planner"},
            "gather": {"agent_role": "summariser"},
            "done": {"terminal": True},
        },
        ("plan", "gather", "split"),
        ("gather", "done", "summarised"),
    ),
    "research": _pipeline(
        {"todo": {"agent_role": "researcher"}, "done": {"terminal": True}},
        ("todo", "done", "complete"),
    ),
    "notes": _pipeline(
        {
            "write": {"agent_role": "pywriter"},
            "read": {"agent_role": "cmdreader"},
            "done": {"terminal": True},
        },
        ("write", "read", "written"),
        ("read", "done", "complete"),
    ),
    "retry": _pipeline(
        {"todo": {"agent_role": "flaky"}, "done": {"terminal": True}},
        ("todo", "done", "complete"),
    ),
    "retrycmd": _pipeline(
        {"todo": {"agent_role": "flakycmd"}, "done": {"terminal": True}},
        ("todo", "done", "complete"),
    ),
    "human": _pipeline(
        {
            "draft": {"agent_role": "drafter"},
            "review": {"human": True},
            "publish": {"agent_role": "publisher"},
            "done": {"terminal": True},
        },
        ("draft", "review", "drafted"),
        ("review", "publish", "approve"),
        ("review", "draft", "reject"),
        ("publish", "done", "published"),
    ),
    "bad": _pipeline(
        {"todo": {"agent_role": "bad"}, "done": {"terminal": True}},
        ("todo", "done", "complete"),
    ),
}


class Rail:
    """The rail under test: its URL, the worker's config and an in-process client for reads."""

    def __init__(self, tmp_path: Path, url: str, token: str | None) -> None:
        self.tmp_path = tmp_path
        self.url = url
        self.token = token
        (tmp_path / "agents_mod.py").write_text(AGENTS)
        (tmp_path / "reader.py").write_text(READER)
        (tmp_path / "flaky_command.py").write_text(FLAKY_COMMAND)
        self.config = self._config()
        self.call(self._pipelines)

    def call(self, fn: Any, *args: Any) -> Any:
        """``await fn(tracker, *args)`` on a fresh client of the rail (from sync test code)."""

        async def main() -> Any:
            tracker = await open_tracker(self.url, api_token=self.token)
            try:
                return await fn(tracker, *args)
            finally:
                await tracker.aclose()

        return anyio.run(main)

    @staticmethod
    async def _pipelines(tracker: Tracker) -> None:
        for name, definition in PIPELINES.items():
            await tracker.create_pipeline(name, definition)

    def _config(self) -> Path:
        lines = ["[tracker]", f'url = "{self.url}"', "retry_initial_s = 0.05"]
        if self.token is not None:
            lines.append(f'api_token = "{self.token}"')
        lines += [
            "[worker]",
            "concurrency = 2",
            "lease_ttl_s = 6",
            "idle_min_s = 0.02",
            "idle_max_s = 0.2",
            "report_flush_s = 0.05",
            "maintenance_interval_s = 0.5",
            f'workdir = "{self.tmp_path / "runs"}"',
        ]
        roles = sorted({r for p in PIPELINES.values() for r in _roles(p["states"])})
        commands = {
            "cmdreader": [
                sys.executable,
                str(self.tmp_path / "reader.py"),
                "{store.memory.greeting}",
            ],
            "flakycmd": [sys.executable, str(self.tmp_path / "flaky_command.py")],
        }
        for role in roles:
            lines += ["[[roles]]", f'name = "{role}"']
            if role in commands:
                lines += ['executor = "command"', "[roles.options]"]
                lines.append(f"argv = {json.dumps(commands[role])}")
            else:
                lines += ['executor = "python"', "[roles.options]"]
                lines.append(f'callable = "agents_mod:{role}"')
        path = self.tmp_path / "worker.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def add(self, pipeline: str, title: str, **fields: Any) -> str:
        """Create a task (fast retries); its id."""

        async def create(tracker: Tracker) -> str:
            pid = next(p.id for p in await tracker.list_pipelines() if p.name == pipeline)
            policy = RetryPolicy(max_attempts=3, retry_delay_ms=50)
            task = TaskCreate(pipeline_id=pid, title=title, retry_policy=policy, **fields)
            return await tracker.create_task(task)

        return str(self.call(create))

    def drain(self) -> str:
        """``backlog-worker run --drain`` (a real process) until the queue is done; its log."""
        env = clean_env(PYTHONPATH=str(self.tmp_path))
        done = subprocess.run(
            [sys.executable, "-m", "worker", "run", "--config", str(self.config), "--drain"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        assert TOKEN not in done.stderr
        return done.stderr

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A ``backlog-worker`` command against the rail (a real process)."""
        env = clean_env()
        if self.token is not None:
            env["BACKLOG_WORKER_API_TOKEN"] = self.token
        return subprocess.run(
            [sys.executable, "-m", "worker", *args, "--tracker", self.url],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    def task(self, task_id: str) -> TaskDetail:
        async def get(tracker: Tracker) -> TaskDetail:
            return await tracker.get_task(task_id)

        result: TaskDetail = self.call(get)
        return result

    def events(self, task_id: str) -> list[Event]:
        async def read(tracker: Tracker) -> list[Event]:
            return (await tracker.list_task_events(task_id, limit=1000)).items

        result: list[Event] = self.call(read)
        return result

    def data(self, task_id: str, kind: str) -> list[Any]:
        return [e.data for e in self.events(task_id) if e.kind == kind]

    def tasks(self, pipeline: str) -> list[str]:
        """The ids of the pipeline's tasks."""

        async def read(tracker: Tracker) -> list[str]:
            pid = next(p.id for p in await tracker.list_pipelines() if p.name == pipeline)
            return [t.id for t in (await tracker.list_tasks(pipeline_id=pid)).items]

        result: list[str] = self.call(read)
        return result

    def store(self, namespace: str) -> dict[str, Any]:
        async def read(tracker: Tracker) -> dict[str, Any]:
            return {e.key: e.value for e in await tracker.store_list(namespace)}

        result: dict[str, Any] = self.call(read)
        return result


@pytest.fixture(params=["file", "served"])
def rail(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rail]:
    if request.param == "file":
        yield Rail(tmp_path, f"sqlite:///{tmp_path}/rail.db", None)
        return
    with serve_tracker(tmp_path) as (url, _db):
        yield Rail(tmp_path, url, TOKEN)


def test_spawn_and_wait_for_fan_in_with_upstream_and_the_store(rail: Rail) -> None:
    parent = rail.add("plan", "tides")
    rail.drain()
    detail = rail.task(parent)
    assert detail.stage == "done", detail
    (spawned,) = rail.data(parent, "spawned")
    children = [rail.task(c) for c in spawned["ids"]]
    assert {c.parent_id for c in children} == {parent}
    assert all(c.stage == "done" for c in children)
    # the parent's next stage ran only after every child had ended
    ended = max(c.latest_run.ended_at_ms or 0 for c in children if c.latest_run)
    assert detail.latest_run is not None and detail.latest_run.started_at_ms >= ended
    (summary,) = rail.data(parent, "result")
    assert summary == {
        "parts": [1, 2, 3],
        "outcomes": ["done"],
        "hits": ["finding-1", "finding-2", "finding-3"],
    }
    memory = rail.store("memory")
    assert memory["topic"] == {"topic": "tides"}
    assert memory["finding-2"] == {"text": "finding 2 on tides"}


def test_store_from_a_python_and_a_command_executor(rail: Rail) -> None:
    task = rail.add("notes", "greet")
    rail.drain()
    assert rail.task(task).stage == "done"
    assert rail.store("memory")["echo"] == "hello from python!"


def test_checkpoint_across_a_retried_attempt(rail: Rail) -> None:
    py_task = rail.add("retry", "python")
    cmd_task = rail.add("retrycmd", "command")
    rail.drain()
    assert rail.task(py_task).stage == "done"
    assert rail.data(py_task, "attempt") == [
        {"n": 1, "previous": None},
        {"n": 2, "previous": {"step": 2}},
    ]
    assert rail.task(cmd_task).stage == "done"
    output = json.dumps(rail.data(cmd_task, "output"))
    assert "resumed from half" in output


def test_a_human_step_with_instructions(rail: Rail) -> None:
    task = rail.add("human", "release notes")
    rail.drain()
    assert rail.task(task).stage == "review"
    moved = rail.cli("task", "transition", task, "approve", "--instructions", "ship it")
    assert moved.returncode == 0, moved.stderr
    rail.drain()
    assert rail.task(task).stage == "done"
    assert rail.data(task, "instructions") == [{"text": "ship it"}]


def test_bad_agent_inputs_are_named_and_the_other_writes_stay(rail: Rail) -> None:
    ids = {
        case: rail.add("bad", case, metadata={"case": case})
        for case in ("spawn", "field", "value", "checkpoint", "wait_for", "cycle")
    }
    rail.drain()
    for case, task in ids.items():
        assert rail.data(task, "before")[0] == {"case": case}
        assert rail.store("memory")[f"ok-{case}"] is True
    refused = {
        case: rail.data(ids[case], "refused") for case in ("spawn", "field", "value", "checkpoint")
    }
    assert "colour" in refused["field"][0]["message"]
    assert refused["field"][0]["type"] == "ValueError"
    assert "no-such-pipeline" in refused["spawn"][0]["message"]
    assert "not found" in refused["spawn"][0]["message"]
    assert "bad-value" in refused["value"][0]["message"]
    assert "not JSON" in refused["value"][0]["message"]
    assert "bad-value" not in rail.store("memory")
    assert "65536" in refused["checkpoint"][0]["message"]
    assert "64 KiB" in refused["checkpoint"][0]["message"]
    # nothing was written: the retried attempt sees no checkpoint
    assert rail.data(ids["checkpoint"], "previous") == [{"value": None}, {"value": None}]
    for case in ("spawn", "field", "value", "checkpoint"):
        assert rail.task(ids[case]).stage == "done"
    # nothing was spawned by the refused calls
    assert rail.tasks("research") == []
    # a wait_for naming an unknown task fails the run for good, naming it
    waiting = rail.task(ids["wait_for"])
    assert waiting.dead_letter_reason is not None and waiting.stage == "todo"
    (error,) = rail.data(ids["wait_for"], "error")
    assert error["reason"] == "bad_wait_for" and "no-such-task" in error["message"]
    # so does one that would close a cycle (here: the task itself), naming it
    cycle = rail.task(ids["cycle"])
    assert cycle.dead_letter_reason is not None and cycle.stage == "todo"
    (error,) = rail.data(ids["cycle"], "error")
    assert error["reason"] == "bad_wait_for" and "cycle" in error["message"]
    assert ids["cycle"] in error["message"]
