"""``backlog-worker submit --wait``: done, dead-lettered, cancelled, timeout, backlog full."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from tests.cli.conftest import Background, Rail
from tracker_client.models import ArtifactCreate, Lease
from tracker_client.protocol import Tracker
from worker.cli.ops.submit import outcome_message


async def next_lease(tracker: Tracker, role: str = "coder") -> Lease:
    """Claim as a worker would: wait for work (no sleeping), bounded by a deadline."""
    with anyio.fail_after(20):
        while True:
            lease = await tracker.claim("bg", role, 60_000)
            if lease is not None:
                return lease
            await tracker.wait_for_work(0.5)


def test_submit_without_wait_prints_the_id(simple: Rail) -> None:
    result = simple.cli("submit", "-p", "simple", "quick")
    assert result.exit_code == 0, result.output
    assert "submitted task" in result.stdout
    assert len(simple.json("task", "list")["items"]) == 1


def test_submit_wait_done_prints_result_and_artifacts(simple: Rail) -> None:
    async def worker(tracker: Tracker) -> None:
        lease = await next_lease(tracker)
        await tracker.add_artifact(
            ArtifactCreate(
                kind="report", uri="file:///tmp/report.md", task_id=lease.task_id,
                run_id=lease.run_id,
            )
        )  # fmt: skip
        await tracker.add_event(lease, "result", {"answer": 42})
        await tracker.transition(lease, "complete")

    bg = Background(simple, worker)
    result = simple.cli("submit", "-p", "simple", "compute", "--wait", "--timeout", "30s")
    bg.join()
    assert result.exit_code == 0, result.output
    assert "stage done" in result.stdout
    assert '"answer":42' in result.stdout
    assert "report.md" in result.stdout
    assert "submitted task" in result.stderr


def test_submit_wait_json(simple: Rail) -> None:
    async def worker(tracker: Tracker) -> None:
        lease = await next_lease(tracker)
        await tracker.add_event(lease, "result", {"ok": True})
        await tracker.transition(lease, "complete")

    bg = Background(simple, worker)
    result = simple.cli("submit", "-p", "simple", "x", "--wait", "--json")
    bg.join()
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["finished"] is True
    assert doc["outcome"] == "done"
    assert doc["result_event"]["data"] == {"ok": True}
    assert doc["task"]["id"] == doc["id"]


def test_submit_wait_dead_lettered(simple: Rail) -> None:
    async def worker(tracker: Tracker) -> None:
        lease = await next_lease(tracker)
        await tracker.fail(lease, "model refused")

    bg = Background(simple, worker)
    result = simple.cli(
        "submit", "-p", "simple", "doomed", "--max-attempts", "0", "--wait", "--timeout", "30s"
    )
    bg.join()
    assert result.exit_code == 1
    assert "dead-lettered (max_attempts_exceeded)" in result.stderr
    assert "model refused" in result.stderr


def test_submit_wait_cancelled(simple: Rail) -> None:
    async def operator(tracker: Tracker) -> None:
        with anyio.fail_after(20):
            while not (page := await tracker.list_tasks()).items:
                await tracker.wait_for_work(0.5)
        await tracker.cancel(page.items[0].id)

    bg = Background(simple, operator)
    result = simple.cli("submit", "-p", "simple", "x", "--wait", "--timeout", "30s")
    bg.join()
    assert result.exit_code == 1
    assert "was cancelled" in result.stderr


def test_submit_wait_timeout_says_the_task_stays_queued(simple: Rail) -> None:
    result = simple.cli("submit", "-p", "simple", "slow", "--wait", "--timeout", "300ms")
    assert result.exit_code == 5
    assert "timed out" in result.stderr
    assert "stays queued in stage 'todo'" in result.stderr
    assert "may still finish" in result.stderr
    task = simple.json("task", "list")["items"][0]
    assert task["dead_letter_reason"] is None


def pending_message(rail: Rail, task_id: str) -> str:
    """What ``submit --wait`` says when its timeout passes for ``task_id`` in its state now."""

    async def go(tracker: Tracker) -> tuple[int, str]:
        result = await tracker.wait(task_id, timeout_s=0)
        return outcome_message(task_id, result, 2.0)

    code, message = rail.run(go)
    assert code == 5
    return message


def test_timeout_message_while_running(simple: Rail) -> None:
    task_id = simple.add("held")
    simple.run(next_lease)  # claimed by 'bg', never finished
    message = pending_message(simple, task_id)
    assert "stays running in stage 'todo' (attempt 1, agent bg)" in message


def test_submit_usage_errors(simple: Rail) -> None:
    result = simple.cli("submit", "x", "--wait")
    assert result.exit_code == 2
    assert "missing --pipeline" in result.stderr
    result = simple.cli("submit", "-p", "simple", "x", "--timeout", "5s")
    assert result.exit_code == 2
    assert "--timeout only applies with --wait" in result.stderr
    result = simple.cli("submit", "-p", "simple", "x", "-m", "nope", "--wait")
    assert result.exit_code == 2
    assert "--metadata is not valid JSON" in result.stderr
    assert simple.json("task", "list")["items"] == []


def test_submit_backlog_full(tmp_path: Path) -> None:
    rail = Rail(tmp_path / "capped.db", "?max_backlog_depth=1")
    rail.pipeline()
    rail.add("occupant")
    result = rail.cli("submit", "-p", "simple", "x", "--wait", "--timeout", "1s")
    assert result.exit_code == 4
    assert "backlog of role 'coder' is full: 1 waiting, cap 1" in result.stderr


def test_submit_wait_on_a_terminal_shows_a_spinner_then_the_result(
    simple: Rail, monkeypatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")

    async def worker(tracker: Tracker) -> None:
        lease = await next_lease(tracker)
        await tracker.transition(lease, "complete")

    bg = Background(simple, worker)
    result = simple.cli("submit", "-p", "simple", "tty", "--wait", "--timeout", "30s")
    bg.join()
    assert result.exit_code == 0, result.output
    assert "stage done" in result.stdout


def test_timeout_message_during_a_retry_delay(simple: Rail) -> None:
    task_id = simple.add("r", "--retry-delay", "1h")

    async def fail_once(tracker: Tracker) -> None:
        await tracker.fail(await next_lease(tracker), "transient")

    simple.run(fail_once)
    message = pending_message(simple, task_id)
    assert "stays queued in stage 'todo', retrying at" in message
    assert "after 2.0s" in message
