"""The command executor inside a real Worker on a real embedded tracker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.command.executor import CommandExecutor
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

from .helpers import PY, kill_leftovers, pid_alive, wait_dead

pytestmark = pytest.mark.anyio

PIPELINE = {
    "initial": "todo",
    "states": {
        "todo": {"agent_role": "coder"},
        "review": {"agent_role": "reviewer"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "todo", "to": "review", "trigger": "complete"},
        {"from": "review", "to": "done", "trigger": "approve"},
        {"from": "review", "to": "todo", "trigger": "reject"},
    ],
}


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


def command_role(name: str, options: dict[str, Any]) -> Role:
    return Role(
        config=RoleConfig(name=name, executor="command", options=options),
        executor=CommandExecutor(options),
    )


def config(**kw: Any) -> WorkerConfig:
    base: dict[str, Any] = {
        "agent_id": "w1",
        "concurrency": 2,
        "lease_ttl_s": 3.0,
        "idle_min_s": 0.01,
        "idle_max_s": 0.1,
        "maintenance_interval_s": 0.5,
        "report_flush_s": 0.05,
    }
    base.update(kw)
    return WorkerConfig(**base)


async def test_task_walks_the_pipeline_through_two_commands(
    tracker: Tracker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "never-in-a-child")
    pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
    [task_id] = await tracker.create_tasks(
        [TaskCreate(pipeline_id=pipeline_id, title="build it", metadata={"ticket": "T-7"})]
    )
    coder = command_role(
        "coder",
        {
            "argv": [
                PY,
                "-c",
                "import os, sys; print('coding', sys.argv[1], sorted(os.environ))",
                "{task.metadata[ticket]}",
            ],
            "env_passthrough": ["BACKLOG_WORKER_API_TOKEN"],
        },
    )
    writes_approve = (
        "import os; open(os.environ['BACKLOG_WORKDIR'] + '/outcome.json', 'w')"
        '.write(\'{{"trigger": "approve", "instructions": "merged"}}\')'
    )
    reviewer = command_role(
        "reviewer", {"argv": [PY, "-c", writes_approve], "exit_codes": {"0": "reject"}}
    )
    worker = Worker(tracker, config(drain=True), [coder, reviewer])
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(lambda task_status: worker.run(task_status=task_status))
    detail = await tracker.get_task(task_id)
    assert detail.stage == "done"
    events = (await tracker.list_task_events(task_id, limit=1000)).items
    kinds = [e.kind for e in events]
    assert kinds.count("exit") == 2
    assert kinds.count("transition") == 2
    output = "".join(
        item["text"] for e in events if e.kind == "output" for item in e.data.get("batch", [e.data])
    )
    assert output.startswith("coding T-7 ")
    assert "BACKLOG_TASK_ID" in output
    assert "BACKLOG_WORKER_API_TOKEN" not in output
    assert "never-in-a-child" not in str([e.data for e in events])
    transitions = [e.data for e in events if e.kind == "transition"]
    assert transitions[-1]["trigger"] == "approve"
    assert transitions[-1]["instructions"] == "merged"


STUBBORN = r"""
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    print(os.getpid(), flush=True)
    while True:
        time.sleep(1)
print(os.getpid(), flush=True)
while True:
    time.sleep(1)
"""


async def test_revoked_lease_kills_the_process_group(tracker: Tracker) -> None:
    pipeline_id = await tracker.create_pipeline("flow", PIPELINE)
    [task_id] = await tracker.create_tasks([TaskCreate(pipeline_id=pipeline_id, title="t")])
    coder = command_role("coder", {"argv": [PY, "-c", STUBBORN], "term_grace_s": 0.2})
    worker = Worker(tracker, config(lease_ttl_s=0.9), [coder])
    pids: list[int] = []

    async def printed_pids() -> list[int]:
        page = await tracker.list_task_events(task_id, limit=1000)
        text = "".join(
            item.get("text", "")
            for e in page.items
            if e.kind == "output"
            for item in e.data.get("batch", [e.data])
        )
        return [int(x) for x in text.split()]

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await tg.start(lambda task_status: worker.run(task_status=task_status))
                while len(pids) < 2:
                    pids = await printed_pids()
                    await anyio.sleep(0.02)
                assert all(pid_alive(p) for p in pids)
                await tracker.cancel(task_id)
                # one heartbeat interval (ttl/3) + TERM grace + slack
                assert await wait_dead(pids, 5.0) == []
                worker.stop()
    finally:
        kill_leftovers(pids)
    detail = await tracker.get_task(task_id)
    assert detail.dead_letter_reason == "cancelled"
