"""``backlog-worker task transition ID TRIGGER`` as a real process on an embedded rail: a task
waiting at a human step moves on, its instructions reach the next run; a stale expected stage, a
stage with a role, a trigger not allowed, an unknown task and bad flags are each one line naming
what is wrong, and nothing is written. ``submit --wait`` says when its task waits for a human,
and finishes once someone moves it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from tests.cli.conftest import Rail
from tracker_client.models import Event, TaskCreate, TaskDetail
from tracker_client.protocol import Tracker
from worker.run.task import instructions_for

pytestmark = [pytest.mark.timeout(120)]

APPROVAL = {
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
#: A pipeline that starts at its human step (``submit --wait`` waits for a person at once).
SIGN_OFF = {
    "initial": "sign",
    "states": {"sign": {"human": True}, "signed": {"terminal": True}},
    "transitions": [{"from": "sign", "to": "signed", "trigger": "sign"}],
}


SUBMIT = (sys.executable, "-m", "worker", "submit", "-p", "signoff", "contract", "--wait")
SUBMIT += ("--timeout", "100s")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["COLUMNS"] = "200"
    return env


def cli(rail: Rail, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``backlog-worker ARGS --tracker URL`` as a real process (no shell)."""
    return subprocess.run(
        [sys.executable, "-m", "worker", *args, "--tracker", rail.url],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        check=False,
    )


def _at_approval(rail: Rail) -> str:
    rail.pipeline("essays", APPROVAL)
    tid = rail.add("essay", pipeline="essays")

    async def write(tracker: Tracker) -> None:
        lease = await tracker.claim("writer-1", "writer", 60_000)
        assert lease is not None
        await tracker.transition(lease, "submit")

    rail.run(write)
    return tid


def _state(rail: Rail, tid: str) -> tuple[TaskDetail, list[Event]]:
    async def read(tracker: Tracker) -> tuple[TaskDetail, list[Event]]:
        events = await tracker.list_task_events(tid, limit=1000)
        return await tracker.get_task(tid), events.items

    return rail.run(read)


def test_a_task_at_a_human_step_moves_and_the_instructions_reach_the_next_run(rail: Rail) -> None:
    tid = _at_approval(rail)
    done = cli(rail, "task", "transition", tid, "reject", "--instructions", "shorter, please")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"task {tid} approval -> draft (reject)"

    async def next_run(tracker: Tracker) -> Any:
        lease = await tracker.claim("writer-1", "writer", 60_000)
        assert lease is not None and lease.task.id == tid
        return await instructions_for(tracker, lease, 100)

    assert rail.run(next_run) == "shorter, please"


def test_instructions_from_stdin_and_the_json_answer(rail: Rail) -> None:
    tid = _at_approval(rail)
    done = cli(
        rail,
        "task",
        "transition",
        tid,
        "approve",
        "--instructions-file",
        "-",
        "--json",
        stdin="ship it\nnow\n",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "previous_stage": "approval",
        "new_stage": "done",
        "trigger": "approve",
    }
    task, events = _state(rail, tid)
    assert task.stage == "done"
    assert events[-1].data["instructions"] == "ship it\nnow\n"


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["approve", "--expected-stage", "draft"], 1, "is in stage 'approval', expected 'draft'"),
        (["ship"], 1, "allowed: 'approve', 'reject'"),
        (["approve", "--instructions", "a", "--instructions-file", "x"], 2, "not both"),
        (["approve", "--instructions-file", "missing.txt"], 2, "missing.txt"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    rail: Rail, args: list[str], code: int, words: str
) -> None:
    tid = _at_approval(rail)
    before = _state(rail, tid)
    failed = cli(rail, "task", "transition", tid, *args)
    assert failed.returncode == code, failed.stderr
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    assert _state(rail, tid) == before


def test_a_stage_with_a_role_and_an_unknown_task_are_refused(rail: Rail) -> None:
    rail.pipeline("essays", APPROVAL)
    tid = rail.add("essay", pipeline="essays")
    before = _state(rail, tid)
    failed = cli(rail, "task", "transition", tid, "submit")
    assert failed.returncode == 1
    assert "not waiting at a human step: stage 'draft' has agent_role 'writer'" in failed.stderr
    assert _state(rail, tid) == before
    unknown = cli(rail, "task", "transition", "00000000-0000-4000-8000-000000000000", "submit")
    assert unknown.returncode == 1 and "unknown task" in unknown.stderr


def test_submit_wait_says_the_task_waits_for_a_human_and_ends_when_moved(rail: Rail) -> None:
    rail.pipeline("signoff", SIGN_OFF)
    proc = subprocess.Popen(
        [*SUBMIT, "--tracker", rail.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        found = threading.Event()

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if "waiting for a human" in line:
                    found.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert found.wait(60), lines
        notice = next(line for line in lines if "waiting for a human" in line)
        tid = notice.split("task transition ")[1].split()[0]
        assert notice.strip() == (
            f"waiting for a human at stage sign: backlog-worker task transition {tid} <trigger>"
            "  (triggers: sign)"
        )
        moved = cli(rail, "task", "transition", tid, "sign")
        assert moved.returncode == 0, moved.stderr
        out, _ = proc.communicate(timeout=60)
        reader.join(10)
        assert proc.returncode == 0, lines
        assert f"task {tid} done: stage signed" in out
        assert sum("waiting for a human" in line for line in lines) == 1  # said once
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_task_show_names_a_subtasks_parent(rail: Rail) -> None:
    rail.pipeline("essays", APPROVAL)
    parent = rail.add("outline", pipeline="essays")

    async def spawn(tracker: Tracker) -> str:
        pid = (await tracker.get_task(parent)).pipeline_id
        return await tracker.create_task(
            TaskCreate(pipeline_id=pid, title="part", parent_id=parent)
        )

    child = rail.run(spawn)
    shown = cli(rail, "task", "show", child)
    assert shown.returncode == 0, shown.stderr
    assert any(line.split()[:2] == ["parent", parent] for line in shown.stdout.splitlines())
    assert (
        json.loads(cli(rail, "task", "show", child, "--json").stdout)["task"]["parent_id"] == parent
    )
