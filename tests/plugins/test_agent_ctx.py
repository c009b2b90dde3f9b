"""The agent calls of the execution context, through the plugin test harness (no rail).

ctx.store, ctx.spawn, ctx.checkpoint / previous_checkpoint, ctx.upstream and
Transition(wait_for=) as a plugin author tests them; every bad input refused at the call, naming
what is wrong, with nothing recorded; a custom sink without the agent calls named.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from plugins.api import ExecutionContext, Outcome, Transition
from plugins.command.executor import CommandExecutor
from plugins.context_hooks import ContextHooks
from plugins.testing import ExecutorHarness
from tracker_client.agent_models import MAX_CHECKPOINT_BYTES, Upstream
from tracker_client.errors import NotFound
from tracker_client.models import ArtifactCreate, Run, Task

pytestmark = pytest.mark.anyio


class Planner:
    """Spawns two subtasks, remembers a note, checkpoints and waits for the children."""

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        seen = await ctx.store.get("notes", "seen")
        await ctx.store.put("notes", "seen", (seen or 0) + 1)
        ids = [await ctx.spawn("research", f"part {i}", metadata={"i": i}) for i in (1, 2)]
        await ctx.checkpoint({"spawned": ids})
        hits = await ctx.store.search("alpha", namespace="notes")
        await ctx.report("hits", [h.key for h in hits])
        return Transition("split", wait_for=ids)


async def test_store_spawn_checkpoint_and_wait_for_in_memory() -> None:
    harness = ExecutorHarness(
        store={"notes": {"seen": 2, "doc": "alpha beta"}}, pipelines=["research"]
    )
    outcome = await harness.run(Planner())
    assert outcome == Transition("split", wait_for=("subtask-1", "subtask-2"))
    assert isinstance(outcome, Transition) and outcome.wait_for == ("subtask-1", "subtask-2")
    assert harness.sink.store["notes"]["seen"] == 3
    assert [(p, f["title"], f["metadata"]) for p, f, _ in harness.sink.spawned] == [
        ("research", "part 1", {"i": 1}),
        ("research", "part 2", {"i": 2}),
    ]
    assert harness.sink.checkpoints == [{"spawned": ["subtask-1", "subtask-2"]}]
    assert harness.events_of("hits") == [["doc"]]


class Resumes:
    async def execute(self, ctx: ExecutionContext) -> Outcome:
        await ctx.report("resumed", {"from": ctx.previous_checkpoint, "attempt": ctx.attempt})
        return Transition("done")


async def test_previous_checkpoint_and_upstream_are_handed_to_the_run() -> None:
    up = Upstream(task_id="t1", title="part 1", stage="done", outcome="done", result={"n": 1})

    class ReadsUpstream:
        async def execute(self, ctx: ExecutionContext) -> Outcome:
            assert [u.result for u in ctx.upstream] == [{"n": 1}]
            assert [u.task_id for u in await ctx.read_upstream()] == ["t1"]
            return Transition("done")

    assert await ExecutorHarness(upstream=[up]).run(ReadsUpstream()) == Transition("done")
    harness = ExecutorHarness(attempt=2, previous_checkpoint={"step": 3})
    await harness.run(Resumes())
    assert harness.events_of("resumed") == [{"from": {"step": 3}, "attempt": 2}]


class Calls:
    """Runs one agent call given by the test and reports the error it raised."""

    def __init__(self, call: Any) -> None:
        self.call = call

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        try:
            await self.call(ctx)
        except (ValueError, NotFound) as exc:
            await ctx.report("refused", {"type": type(exc).__name__, "message": str(exc)})
        return Transition("done")


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda ctx: ctx.store.put("notes", "k", {1, 2}), ["'notes'/'k'", "set", "not JSON"]),
        (lambda ctx: ctx.store.put("notes", "k", float("nan")), ["'k'", "not JSON"]),
        (lambda ctx: ctx.store.put("", "k", 1), ["namespace"]),
        (lambda ctx: ctx.store.search("x", limit=0), ["limit"]),
        (
            lambda ctx: ctx.checkpoint({"blob": "x" * MAX_CHECKPOINT_BYTES}),
            ["too large", str(MAX_CHECKPOINT_BYTES), "64 KiB"],
        ),
        (lambda ctx: ctx.checkpoint(object()), ["checkpoint", "not JSON"]),
        (lambda ctx: ctx.spawn("nope", "child"), ["'nope'", "not found", "research"]),
        (lambda ctx: ctx.spawn("research", "c", metadata=[1]), ["metadata", "list"]),
        (lambda ctx: ctx.spawn("research", "c", colour="red"), ["bad subtask", "colour"]),
    ],
    ids=[
        "set",
        "nan",
        "namespace",
        "limit",
        "oversized",
        "object",
        "pipeline",
        "metadata",
        "field",
    ],
)
async def test_bad_agent_input_is_refused_naming_it_and_nothing_is_recorded(
    call: Any, words: list[str]
) -> None:
    harness = ExecutorHarness(store={"notes": {"k": "kept"}}, pipelines=["research"])
    assert await harness.run(Calls(call)) == Transition("done")
    (refused,) = harness.events_of("refused")
    for word in words:
        assert word in refused["message"], refused
    assert harness.sink.store == {"notes": {"k": "kept"}}
    assert harness.sink.checkpoints == [] and harness.sink.spawned == []


async def test_wait_for_must_be_a_list_of_ids() -> None:
    with pytest.raises(ValueError, match="list of task ids"):
        Transition("x", wait_for="abc")
    assert Transition("x", wait_for=["a"]).wait_for == ("a",)


async def test_a_sink_without_agent_calls_is_named(tmp_path: Path) -> None:
    class PlainSink:
        async def emit_events(self, events: list[tuple[str, Any]]) -> None:
            return None

        async def emit_artifact(self, artifact: ArtifactCreate) -> str:
            return "a"

    harness = ExecutorHarness()
    ctx = ExecutionContext(
        task=Task.model_validate(harness.task.model_dump()),
        run=Run.model_validate(harness.run_model.model_dump()),
        hooks=ContextHooks(PlainSink(), tmp_path),
    )
    with pytest.raises(RuntimeError, match=r"PlainSink.*no agent operations"):
        await ctx.store.get("ns", "k")
    with pytest.raises(RuntimeError, match=r"ctx\.spawn"):
        await ctx.spawn("p", "t")


# -- the command executor as an agent ---------------------------------------------------------
def script(tmp_path: Path, body: str, *args: str, **options: Any) -> CommandExecutor:
    """A command executor running ``body`` (a python script in its own file) with ``args``."""
    path = tmp_path.parent / f"{tmp_path.name}-script.py"
    path.write_text(body)
    return CommandExecutor({"argv": [sys.executable, str(path), *args], **options})


async def test_command_reads_the_store_through_templates_and_writes_through_outcome(
    tmp_path: Path,
) -> None:
    body = (
        "import json, os, sys\n"
        "json.dump({'trigger': 'split', 'store': {'notes': {'echo': sys.argv[1] + os.environ"
        "['TOPIC'], 'old': None}}, 'spawn': [{'pipeline': 'research', 'title': 'a'}, "
        "{'pipeline': 'research', 'title': 'b', 'wait': False, 'priority': 3}], "
        "'wait_for': ['other']}, open('outcome.json', 'w'))\n"
    )
    harness = ExecutorHarness(
        workdir=tmp_path,
        store={"notes": {"greeting": "hi ", "topic": {"x": 1}, "old": 1}},
        pipelines=["research"],
    )
    exe = script(
        tmp_path,
        body,
        "{store.notes.greeting}",
        env={"TOPIC": "{store.notes.topic}{store.notes.absent}"},
    )
    outcome = await harness.run(exe)
    assert isinstance(outcome, Transition)
    assert outcome.trigger == "split" and outcome.wait_for == ("subtask-1", "other")
    assert harness.sink.store["notes"]["echo"] == 'hi {"x": 1}'
    assert "old" not in harness.sink.store["notes"]
    assert [(f["title"], f["priority"]) for _, f, _ in harness.sink.spawned] == [("a", 0), ("b", 3)]


async def test_command_checkpoint_file_round_trip_and_upstream_file(tmp_path: Path) -> None:
    body = (
        "import json\n"
        "prev = json.load(open('checkpoint.json'))\n"
        "up = json.load(open('upstream.json'))\n"
        "json.dump({'step': prev['step'] + 1, 'up': up[0]['result']}, "
        "open('checkpoint.json', 'w'))\n"
        "raise SystemExit(1)\n"
    )
    up = Upstream(task_id="t1", title="x", stage="done", outcome="done", result="r1")
    harness = ExecutorHarness(
        workdir=tmp_path, attempt=2, previous_checkpoint={"step": 1}, upstream=[up]
    )
    outcome = await harness.run(script(tmp_path, body))
    assert not isinstance(outcome, Transition) and outcome.reason == "exit_code"
    assert harness.sink.checkpoints == [{"step": 2, "up": "r1"}]


async def test_command_unchanged_checkpoint_is_not_written_again(tmp_path: Path) -> None:
    harness = ExecutorHarness(workdir=tmp_path, attempt=2, previous_checkpoint={"step": 1})
    assert await harness.run(script(tmp_path, "pass")) == Transition(None)
    assert harness.sink.checkpoints == []


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"store": {"notes": "flat"}}, ["'store' must be an object"]),
        ({"spawn": [{"title": "no pipeline"}]}, ["spawn[0]", "'pipeline'"]),
        ({"spawn": [{"pipeline": "p", "title": "t", "colour": 1}]}, ["spawn[0]", "'colour'"]),
        ({"wait_for": "abc"}, ["'wait_for' must be a list of task ids"]),
        ({"spawn": [{"pipeline": "p", "title": "t", "metadata": [1]}]}, ["'metadata'"]),
        ({"spawn": [{"pipeline": "p", "title": "t", "priority": "high"}]}, ["'priority'"]),
        ({"spawn": [{"pipeline": "nope", "title": "t"}]}, ["'nope'", "not found"]),
    ],
    ids=[
        "store",
        "spawn-pipeline",
        "spawn-key",
        "wait_for",
        "metadata",
        "priority",
        "unknown-pipeline",
    ],
)
async def test_command_bad_agent_outcome_fails_naming_it_and_writes_nothing(
    tmp_path: Path, doc: dict[str, Any], words: list[str]
) -> None:
    body = f"open('outcome.json', 'w').write({json.dumps(json.dumps(doc))})"
    harness = ExecutorHarness(workdir=tmp_path, pipelines=["research"])
    outcome = await harness.run(script(tmp_path, body))
    assert not isinstance(outcome, Transition) and outcome.reason == "bad_executor_output"
    assert not outcome.retryable
    for word in words:
        assert word in outcome.message, outcome.message
    assert harness.sink.spawned == [] and harness.sink.store == {}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("not json", ["checkpoint.json", "not valid JSON"]),
        (json.dumps({"b": "x" * MAX_CHECKPOINT_BYTES}), ["checkpoint.json", "too large", "64 KiB"]),
    ],
    ids=["not-json", "oversized"],
)
async def test_command_bad_checkpoint_file_fails_naming_it(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    (tmp_path / "payload").write_text(text)
    body = "import shutil; shutil.copy('payload', 'checkpoint.json')"
    harness = ExecutorHarness(workdir=tmp_path)
    outcome = await harness.run(script(tmp_path, body))
    assert not isinstance(outcome, Transition) and outcome.reason == "bad_executor_output"
    for word in words:
        assert word in outcome.message, outcome.message
    assert harness.sink.checkpoints == []


async def test_command_unknown_store_placeholder_shape_is_refused_at_build() -> None:
    from tracker_client.errors import ExecutorError

    with pytest.raises(ExecutorError, match=r"\{store\.namespace\.key\}"):
        CommandExecutor({"argv": ["x", "{store.onlyns}"]})


# -- a plain def (the python executor runs it in a thread with a blocking context) ------------
def sync_agent(ctx: Any) -> Transition:
    """A plain ``def`` agent: the same calls, blocking."""
    ctx.store.put("notes", "from-thread", {"prev": ctx.previous_checkpoint})
    child = ctx.spawn("research", "child", priority=2)
    ctx.checkpoint({"child": child})
    hits = [e.key for e in ctx.store.search("thread", namespace="notes")]
    ctx.report("seen", {"hits": hits, "upstream": [u.task_id for u in ctx.read_upstream()]})
    return Transition("split", wait_for=[child])


async def test_a_plain_def_gets_the_agent_calls_blocking() -> None:
    from plugins.python.executor import PythonExecutor

    up = Upstream(task_id="t9", title="x", stage="done", outcome="done")
    harness = ExecutorHarness(
        pipelines=["research"], previous_checkpoint={"n": 1}, upstream=[up], attempt=2
    )
    exe = PythonExecutor({"callable": "tests.plugins.test_agent_ctx:sync_agent"})
    outcome = await harness.run(exe)
    assert outcome == Transition("split", wait_for=("subtask-1",))
    assert harness.sink.store["notes"]["from-thread"] == {"prev": {"n": 1}}
    assert harness.sink.checkpoints == [{"child": "subtask-1"}]
    assert harness.events_of("seen") == [{"hits": ["from-thread"], "upstream": ["t9"]}]
