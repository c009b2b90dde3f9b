"""``task show|cancel|requeue|cancel-all`` against a real embedded rail."""

from __future__ import annotations

import anyio

from tests.cli.conftest import Rail
from tracker_client.models import ArtifactCreate
from tracker_client.protocol import Tracker


def claim(rail: Rail, role: str = "coder") -> tuple[str, str]:
    """Claim a task of ``role`` as agent 'w1'; (task id, run id). The lease stays live."""

    async def go(tracker: Tracker) -> tuple[str, str]:
        lease = await tracker.claim("w1", role, 60_000)
        assert lease is not None
        return lease.task_id, lease.run_id

    return rail.run(go)


def test_show_state_runs_events_artifacts(simple: Rail) -> None:
    task_id = simple.add("investigate", "--max-attempts", "3", "--retry-delay", "1h")

    async def work(tracker: Tracker) -> None:
        lease = await tracker.claim("w1", "coder", 60_000)
        assert lease is not None
        await tracker.add_event(lease, "progress", {"step": "reading logs"})
        await tracker.add_artifact(
            ArtifactCreate(
                kind="log", uri="file:///tmp/x.log", task_id=task_id, run_id=lease.run_id
            )
        )
        await tracker.fail(lease, "disk full")

    simple.run(work)
    shown = simple.json("task", "show", task_id)
    assert [r["status"] for r in shown["runs"]] == ["failed"]
    assert shown["runs"][0]["error"] == "disk full"
    kinds = [e["kind"] for e in shown["events"]]
    assert "progress" in kinds
    assert "retry_scheduled" in kinds
    assert shown["artifacts"][0]["uri"] == "file:///tmp/x.log"

    table = simple.cli("task", "show", task_id)
    assert table.exit_code == 0, table.output
    out = table.stdout
    for text in ("investigate", "waiting for retry", "disk full", "progress", "x.log", "runs"):
        assert text in out, text
    limited = simple.cli("task", "show", task_id, "--events", "1")
    assert "events (last 1 of" in limited.stdout


def test_show_running_and_waiting_states(simple: Rail) -> None:
    first = simple.add("first", "--priority", "9")
    second = simple.add("second", "--depends-on", first)
    claim(simple)
    assert "running (attempt 1, agent w1)" in simple.cli("task", "show", first).stdout
    assert "waiting on 1 dependency" in simple.cli("task", "show", second).stdout


def test_show_unknown_task(simple: Rail) -> None:
    result = simple.cli("task", "show", "no-such-task")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: unknown task 'no-such-task'"


def test_cancel_waiting_then_again(simple: Rail) -> None:
    task_id = simple.add("t", "--dead-letter-stage", "dead")
    result = simple.cli("task", "cancel", task_id)
    assert result.exit_code == 0, result.output
    assert f"cancelled task {task_id}" in result.stdout
    task = simple.json("task", "show", task_id)["task"]
    assert task["dead_letter_reason"] == "cancelled"
    assert task["stage"] == "dead"
    again = simple.cli("task", "cancel", task_id)
    assert again.exit_code == 1
    assert again.stderr.startswith("error: ")


def test_cancel_running_revokes_lease(simple: Rail) -> None:
    task_id = simple.add("t")
    claim(simple)
    result = simple.json("task", "cancel", task_id)
    assert result["revoked_lease"] is True
    text = simple.cli("task", "show", task_id).stdout
    assert "cancelled" in text


def test_cancel_unknown_task(simple: Rail) -> None:
    result = simple.cli("task", "cancel", "nope")
    assert result.exit_code == 1
    assert "unknown task 'nope'" in result.stderr


def test_requeue_cancelled_task(simple: Rail) -> None:
    task_id = simple.add("t")
    simple.json("task", "cancel", task_id)
    result = simple.cli("task", "requeue", task_id)
    assert result.exit_code == 0, result.output
    assert "requeued task" in result.stdout
    assert "fresh retry budget" in result.stdout
    task = simple.json("task", "show", task_id)["task"]
    assert task["dead_letter_reason"] is None
    assert task["stage"] == "todo"
    simple.json("task", "cancel", task_id)
    moved = simple.json("task", "requeue", task_id, "--stage", "check", "--keep-attempts")
    assert moved["stage"] == "check"
    assert moved["reset_attempts"] is False


def test_requeue_errors(simple: Rail) -> None:
    task_id = simple.add("t")
    result = simple.cli("task", "requeue", task_id)
    assert result.exit_code == 1
    assert "dead" in result.stderr  # not dead-lettered
    simple.json("task", "cancel", task_id)
    result = simple.cli("task", "requeue", task_id, "--stage", "limbo")
    assert result.exit_code == 2
    assert "limbo" in result.stderr
    result = simple.cli("task", "requeue", "nope")
    assert result.exit_code == 1
    assert "unknown task 'nope'" in result.stderr


def test_cancel_all_by_pipeline_and_role(simple: Rail) -> None:
    for i in range(3):
        simple.add(f"t{i}")
    claim(simple)
    assert simple.json("task", "cancel-all", "--pipeline", "simple", "--yes") == {"cancelled": 3}
    simple.add("again")
    result = simple.cli("task", "cancel-all", "--role", "coder", "--yes")
    assert result.exit_code == 0
    assert "cancelled 1 task" in result.stdout
    assert simple.json("task", "cancel-all", "--role", "checker", "--yes") == {"cancelled": 0}


def test_cancel_all_needs_a_filter_and_confirmation(simple: Rail) -> None:
    simple.add("t")
    result = simple.cli("task", "cancel-all", "--yes")
    assert result.exit_code == 2
    assert "needs --pipeline and/or --role" in result.stderr
    result = simple.cli("task", "cancel-all", "--role", "coder")
    assert result.exit_code == 2
    assert "--yes" in result.stderr
    assert simple.json("task", "list")["items"][0]["dead_letter_reason"] is None
    result = simple.cli("task", "cancel-all", "--pipeline", "nope", "--yes")
    assert result.exit_code == 1
    assert "unknown pipeline" in result.stderr


def test_cancel_all_asks_at_a_terminal(simple: Rail, monkeypatch) -> None:
    import worker.cli.ops.task.cancel as ops_task_cancel

    monkeypatch.setattr(ops_task_cancel, "stdin_is_tty", lambda: True)
    simple.add("t")
    refused = simple.cli("task", "cancel-all", "--role", "coder", input="n\n")
    assert refused.exit_code == 1  # click's Abort
    assert "Cancel every open task of role coder?" in refused.output
    assert simple.json("task", "list")["items"][0]["dead_letter_reason"] is None
    accepted = simple.cli("task", "cancel-all", "--role", "coder", input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "cancelled 1 task" in accepted.stdout


def test_show_names_a_crash_loop_and_its_knob_and_requeue_starts_the_count_again(
    simple: Rail,
) -> None:
    task_id = simple.add("oom", "--max-stale-attempts", "2")

    async def killed_twice(tracker: Tracker) -> None:
        for _ in range(2):  # a 1 ms lease never heartbeaten: its worker is gone
            assert await tracker.claim("w1", "coder", 1) is not None
            with anyio.fail_after(10):
                while not (await tracker.maintenance()).expired_leases:
                    await anyio.sleep(0.005)

    simple.run(killed_twice)
    out = simple.cli("task", "show", task_id).stdout
    assert "dead-lettered (crash_loop: its lease expired 2 times in a row" in out
    assert "the task's max_stale_attempts = 2" in out
    assert "`task requeue` starts the count again" in out
    assert "2 lease expiries in a row, the task's max_stale_attempts 2" in out  # the event
    assert simple.json("task", "show", task_id)["task"]["stale_streak"] == 2
    assert simple.cli("task", "requeue", task_id).exit_code == 0
    shown = simple.json("task", "show", task_id)["task"]
    assert (shown["dead_letter_reason"], shown["stale_streak"]) == (None, 0)
    assert "0 in a row (crash-loop limit 2)" in simple.cli("task", "show", task_id).stdout
