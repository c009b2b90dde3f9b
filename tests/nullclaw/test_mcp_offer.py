"""The nullclaw executor's MCP offer (option ``mcp``; docs/submit/mcp.md#nullclaw).

Opted in, each run's generated config lists the rail's MCP server bound to the run's task, with
the rail's URL and the *path* of a token file (never a token); not opted in, no server. End to
end: the fake nullclaw starts that server as nullclaw does and calls its tools over stdio, and
the subtask it submitted is the task's child on the real rail, its store write carries the
task's id. Bad offers are refused naming the option.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from plugins.api import Transition
from plugins.nullclaw.executor import NullClawExecutor
from plugins.nullclaw.options import parse_options
from tests.worker.daemonkit import make_rail
from tracker_client.errors import ExecutorError
from tracker_client.producer import connect

from .conftest import RecordingSink, make_ctx, read_record

pytestmark = pytest.mark.anyio

SECRET = "bwt_not-in-any-config-or-argv-0123456789"


async def test_no_server_is_offered_unless_the_role_opts_in(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    outcome = await NullClawExecutor(options).execute(make_ctx(tmp_path / "run", sink))
    assert isinstance(outcome, Transition)
    assert "mcp_servers" not in read_record(record)["config"]


async def test_the_offer_binds_the_server_to_the_task_with_a_token_file_only(
    tmp_path: Path, options: dict[str, Any], sink: RecordingSink, record: Path
) -> None:
    token_file = tmp_path / "agent.token"
    token_file.write_text(SECRET)
    token_file.chmod(0o600)
    offer = {"tracker": "http://127.0.0.1:9/", "token_file": str(token_file)}
    executor = NullClawExecutor({**options, "mcp": offer})
    outcome = await executor.execute(make_ctx(tmp_path / "run", sink, id="task-7"))
    assert isinstance(outcome, Transition)
    rec = read_record(record)
    entry = rec["config"]["mcp_servers"]["rail"]
    assert entry["command"] == sys.executable
    assert entry["args"] == [
        "-m", "worker", "mcp", "--task", "task-7",
        "--tracker", "http://127.0.0.1:9/", "--token-file", str(token_file),
    ]  # fmt: skip
    assert SECRET not in json.dumps(rec)  # not in the config, argv or nullclaw's environment
    assert SECRET not in json.dumps(sink.events)
    assert await executor.readiness() == []  # the extra is there, the file is private


async def test_a_nullclaw_agent_fans_out_and_remembers_through_the_rails_tools(
    tmp_path: Path,
    options: dict[str, Any],
    sink: RecordingSink,
    record: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = make_rail(tmp_path)
    url = f"sqlite://{db}"
    async with connect(url) as rail:
        parent = await rail.submit("flow", "research the topic")
    calls = [
        {"server": "rail", "tool": "submit", "arguments": {"pipeline": "flow", "title": "part 1"}},
        {
            "server": "rail",
            "tool": "store_put",
            "arguments": {"namespace": "notes", "key": "finding", "value": "whales sing"},
        },
        {"server": "rail", "tool": "store_search", "arguments": {"query": "whales"}},
    ]
    answers_file = tmp_path / "mcp-answers.json"
    monkeypatch.setenv("FAKE_NULLCLAW_MCP_CALLS", json.dumps(calls))
    monkeypatch.setenv("FAKE_NULLCLAW_MCP_RECORD", str(answers_file))
    executor = NullClawExecutor({**options, "mcp": {"tracker": url}})
    outcome = await executor.execute(make_ctx(tmp_path / "run", sink, id=parent))
    assert isinstance(outcome, Transition)

    listed, submitted, put, searched = json.loads(answers_file.read_text())
    assert {"submit", "wait", "store_search", "store_put"} <= set(listed["tools"])
    for answer in (submitted, put, searched):
        assert not answer["result"].get("isError"), answer
    child_id = submitted["result"]["structuredContent"]["task_id"]
    [hit] = searched["result"]["structuredContent"]["result"]
    assert hit["value"] == {"value": "whales sing", "task_id": parent}
    async with connect(url) as rail:
        child = await rail.task(child_id)
        assert (child.parent_id, child.title) == (parent, "part 1")
        entry = await rail.tracker.store_get("notes", "finding")
        assert entry.value == {"value": "whales sing", "task_id": parent}
    assert "mcp_servers" in read_record(record)["config"]


@pytest.mark.parametrize(
    ("offer", "says"),
    [
        ({}, "exactly one of 'tracker'"),
        ({"tracker": "sqlite:///a.db", "tracker_file": "/x"}, "exactly one of 'tracker'"),
        ({"tracker": "postgresql://u:hunter2@127.0.0.1/r"}, "carries a password"),
        ({"tracker": "postgresql://u@127.0.0.1/r?password=hunter2"}, "carries a password"),
        ({"tracker": "sqlite:///a.db", "token_file": "agent.token"}, "absolute path"),
        ({"tracker": "sqlite:///a.db", "name": "has space"}, "name"),
        ({"tracker": "sqlite:///a.db", "token": "x"}, "token"),
    ],
    ids=[
        "none",
        "both",
        "password",
        "password-parameter",
        "relative-token-file",
        "bad-name",
        "unknown-key",
    ],
)
def test_a_bad_offer_is_refused_naming_it(
    options: dict[str, Any], offer: dict[str, Any], says: str
) -> None:
    with pytest.raises(ExecutorError, match="mcp") as info:
        parse_options({**options, "mcp": offer})
    assert says in str(info.value)
    assert "hunter2" not in str(info.value)


def test_an_offer_needs_a_generated_config(options: dict[str, Any], tmp_path: Path) -> None:
    existing = {k: v for k, v in options.items() if k not in ("provider", "model", "base_url")}
    with pytest.raises(ExecutorError, match="'mcp' puts the rail's MCP server"):
        parse_options({**existing, "home": str(tmp_path), "mcp": {"tracker": "sqlite:///a"}})


async def test_readiness_names_an_unreadable_or_shared_token_file(
    options: dict[str, Any], tmp_path: Path
) -> None:
    shared = tmp_path / "shared.token"
    shared.write_text(SECRET)
    shared.chmod(0o644)
    offer = {"tracker": "sqlite:///a.db", "token_file": str(shared)}
    problems = await NullClawExecutor({**options, "mcp": offer}).readiness()
    assert any("readable by other users" in p for p in problems), problems
    offer["token_file"] = str(tmp_path / "missing.token")
    problems = await NullClawExecutor({**options, "mcp": offer}).readiness()
    assert any("mcp.token_file" in p and "cannot be read" in p for p in problems), problems
    assert not any(SECRET in p for p in problems)
