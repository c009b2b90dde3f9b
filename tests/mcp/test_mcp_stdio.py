"""``backlog-worker mcp`` on stdio, driven by the MCP SDK's own client (docs/submit/mcp.md).

An agent using only MCP submits a task that a real worker process does, waits for it and reads
its result and artifacts; a server bound to a task (``--task``) makes subtasks and tags its
store writes; every bad input is a tool error naming what is wrong, and nothing is written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.mcp.kit import CLI, ok, refused, stdio_session
from tests.worker.daemonkit import (
    _pipeline,
    clean_env,
    make_rail,
    reap,
    spawn_worker,
    write_config,
)
from tracker_client.bounds import MAX_TITLE_CHARS
from tracker_client.ops_models import WaitResult

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(120)]

#: What the worker's command does: a report file declared as an artifact in outcome.json.
REPORT = (
    "import json, pathlib\n"
    "pathlib.Path('report.md').write_text('the answer is 42\\n')\n"
    "pathlib.Path('outcome.json').write_text(json.dumps("
    "{'artifacts': [{'path': 'report.md', 'kind': 'report'}]}))\n"
)
TOOLS = {
    "submit",
    "wait",
    "get_task",
    "task_artifacts",
    "cancel",
    "list_tasks",
    "store_search",
    "store_get",
    "store_put",
    "transition",
}


async def test_an_agent_submits_waits_and_reads_the_result_through_mcp_only(
    tmp_path: Path,
) -> None:
    db = make_rail(tmp_path)
    url = f"sqlite://{db}"
    script = tmp_path / "report.py"  # a file: the command's argv is a template ({...})
    script.write_text(REPORT)
    worker = spawn_worker(
        write_config(tmp_path, url, token=None, argv=[sys.executable, str(script)]),
        tmp_path / "worker.log",
    )
    try:
        async with stdio_session(tmp_path / "mcp.log", "--tracker", url) as mcp:
            assert mcp.server_info is not None  # a client shows who answered, and which release
            assert (mcp.server_info.name, mcp.server_info.version) == (
                "backlog-worker",
                version("backlog-worker"),
            )
            assert {t.name for t in (await mcp.list_tools()).tools} == TOOLS
            task_id = (await ok(mcp, "submit", pipeline="flow", title="answer"))["task_id"]

            done = await ok(mcp, "wait", task_id=task_id, timeout_s=50)
            assert (done["finished"], done["outcome"]) == (True, "done")
            assert done["task"]["stage"] == "done"
            [artifact] = done["artifacts"]
            assert artifact["kind"] == "report"
            path = Path(artifact["uri"].removeprefix("file://"))
            assert path.read_text() == "the answer is 42\n"
            listed = await ok(mcp, "task_artifacts", task_id=task_id)
            assert [a["id"] for a in listed["result"]] == [artifact["id"]]

            detail = await ok(mcp, "get_task", task_id=task_id)
            assert detail["latest_run"]["status"] == "completed"
            page = await ok(mcp, "list_tasks", pipeline="flow", stage="done")
            assert [t["id"] for t in page["items"]] == [task_id]
            assert "already" in (await refused(mcp, "cancel", task_id=task_id)).lower()

            queue = json.loads((await mcp.read_resource("backlog://queue")).contents[0].text)
            assert {r["role"] for r in queue["roles"]} == {"coder"}
            pipelines = (await mcp.read_resource("backlog://pipelines")).contents[0].text
            assert [p["name"] for p in json.loads(pipelines)] == ["flow"]
    finally:
        reap(worker)


async def test_dedupe_and_the_store_search_get_and_put_through_mcp(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    async with stdio_session(tmp_path / "mcp.log", "--tracker", f"sqlite://{db}") as mcp:
        # the schemas are the API's: its bounds in, its models out
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        title = tools["submit"].input_schema["properties"]["title"]
        assert title["maxLength"] == MAX_TITLE_CHARS
        assert tools["wait"].input_schema["properties"]["timeout_s"]["maximum"] == 60
        assert tools["wait"].output_schema is not None
        assert set(WaitResult.model_fields) <= set(tools["wait"].output_schema["properties"])
        first = await ok(mcp, "submit", pipeline="flow", title="answer", dedupe_key="q-1")
        again = await ok(mcp, "submit", pipeline="flow", title="answer", dedupe_key="q-1")
        assert again["task_id"] == first["task_id"]  # deduped while it waits (no worker here)
        pending = await ok(mcp, "wait", task_id=first["task_id"], timeout_s=0.2)
        assert (pending["finished"], pending["outcome"]) == (False, "pending")

        put = await ok(mcp, "store_put", namespace="notes", key="k1", value={"text": "blue whale"})
        assert put == {"namespace": "notes", "key": "k1", "task_id": None}
        got = await ok(mcp, "store_get", namespace="notes", key="k1")
        assert got["value"] == {"text": "blue whale"}
        found = await ok(mcp, "store_search", query="whale", namespace="notes")
        assert [e["key"] for e in found["result"]] == ["k1"]
        assert "not" in (await refused(mcp, "store_get", namespace="notes", key="nope")).lower()


async def test_a_server_bound_to_a_task_makes_subtasks_and_tags_its_writes(
    tmp_path: Path,
) -> None:
    db = make_rail(tmp_path)
    url = f"sqlite://{db}"
    async with stdio_session(tmp_path / "parent.log", "--tracker", url) as mcp:
        parent = (await ok(mcp, "submit", pipeline="flow", title="parent"))["task_id"]
    env = {"BACKLOG_MCP_TASK": parent}  # as the nullclaw executor's config sets it
    async with stdio_session(tmp_path / "bound.log", "--tracker", url, env=env) as mcp:
        child = await ok(
            mcp, "submit", pipeline="flow", title="child", priority=5, budgets={"max_runs": 2}
        )
        assert child["parent_id"] == parent
        detail = await ok(mcp, "get_task", task_id=child["task_id"])
        assert (detail["parent_id"], detail["priority"]) == (parent, 5)
        assert detail["budgets"] == {"max_runs": 2}  # an agent caps what it hands out

        await ok(mcp, "store_put", namespace="memory", key="finding", value="it works")
        got = await ok(mcp, "store_get", namespace="memory", key="finding")
        assert got["value"] == {"value": "it works", "task_id": parent}

        cancelled = await ok(mcp, "cancel", task_id=parent, reason="no longer needed")
        assert cancelled["cancelled_descendants"] == 1
        child_after = await ok(mcp, "wait", task_id=child["task_id"], timeout_s=1)
        assert child_after["finished"] is True  # cancelled with its parent, for its reason
        assert child_after["task"]["dead_letter_reason"] == "no longer needed"


async def test_bad_input_is_a_tool_error_naming_it_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    db = make_rail(tmp_path)
    async with stdio_session(tmp_path / "mcp.log", "--tracker", f"sqlite://{db}") as mcp:
        unknown = await refused(mcp, "submit", pipeline="flwo", title="x")
        assert "no pipeline named 'flwo'" in unknown and "flow" in unknown
        too_long = await refused(mcp, "wait", task_id="x", timeout_s=600)
        assert "timeout_s" in too_long and "60" in too_long
        assert "title" in await refused(mcp, "submit", pipeline="flow", title="")
        over = await refused(mcp, "submit", pipeline="flow", title="x", budgets={"max_runs": -1})
        assert "max_runs" in over, over
        missing = await refused(mcp, "get_task", task_id="no-such-task")
        assert "no-such-task" in missing or "not found" in missing.lower()
        step = await refused(mcp, "transition", task_id="no-such-task", trigger="approve")
        assert "NotFound" in step, step
        page = await ok(mcp, "list_tasks", pipeline="flow")
        assert page["items"] == []  # nothing was created by the refused calls


def test_an_unknown_task_to_bind_to_is_one_line_at_start(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    done = subprocess.run(
        [*CLI, "mcp", "--tracker", f"sqlite://{db}", "--task", "no-such-task"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "no-such-task" in done.stderr
    assert done.stdout == ""  # stdout is the protocol's


def test_a_missing_rail_file_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    done = subprocess.run(
        [*CLI, "mcp", "--tracker", f"sqlite://{missing}"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert str(missing) in done.stderr and not missing.exists()


async def test_the_same_tools_on_a_postgresql_rail(tmp_path: Path) -> None:
    from tests.postgres.server import fresh_schema_url

    url = fresh_schema_url("mcp-tools")
    made = subprocess.run(
        [*CLI, "pipeline", "create", "-f", str(_pipeline(tmp_path)), "--tracker", url],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    async with stdio_session(tmp_path / "mcp.log", "--tracker", url) as mcp:
        task_id = (await ok(mcp, "submit", pipeline="flow", title="on postgres"))["task_id"]
        page = await ok(mcp, "list_tasks", pipeline="flow")
        assert [t["id"] for t in page["items"]] == [task_id]
        await ok(mcp, "store_put", namespace="notes", key="pg", value={"text": "elephant"})
        found = await ok(mcp, "store_search", query="elephant")
        assert [e["key"] for e in found["result"]] == ["pg"]
        cancelled = await ok(mcp, "cancel", task_id=task_id)
        assert cancelled["task_id"] == task_id


async def test_an_agent_acts_on_a_human_step(tmp_path: Path) -> None:
    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.models import TaskCreate

    approval = {
        "initial": "draft",
        "states": {
            "draft": {"agent_role": "writer"},
            "approval": {"human": True},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "draft", "to": "approval", "trigger": "submit"},
            {"from": "approval", "to": "done", "trigger": "approve"},
            {"from": "approval", "to": "draft", "trigger": "reject"},
        ],
    }
    db = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(db))
    try:
        pid = await tracker.create_pipeline("essays", approval)
        tid = await tracker.create_task(TaskCreate(pipeline_id=pid, title="essay"))
        lease = await tracker.claim("writer-1", "writer", 60_000)
        assert lease is not None
        await tracker.transition(lease, "submit")  # now waiting at the human step
    finally:
        await tracker.aclose()

    async with stdio_session(tmp_path / "mcp.log", "--tracker", f"sqlite://{db}") as mcp:
        wrong = await refused(mcp, "transition", task_id=tid, trigger="publish")
        assert "approve" in wrong and "reject" in wrong  # the allowed triggers are named
        moved = await ok(
            mcp, "transition", task_id=tid, trigger="reject", instructions="cite sources"
        )
        assert moved == {"previous_stage": "approval", "new_stage": "draft", "trigger": "reject"}
        again = await refused(mcp, "transition", task_id=tid, trigger="approve")
        assert "not_a_human_step" in again  # it is the writer's again
