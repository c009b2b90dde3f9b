"""``task show`` prints the latest 10 runs and 20 events, says how many it left out, and shows
everything with ``--all`` (``--json`` always holds all of them). Real CLI, real SQLite rail."""

from __future__ import annotations

from tests.cli.conftest import Rail
from tracker_client.protocol import Tracker

RUNS = 12


def _failing_task(rail: Rail) -> str:
    task_id = rail.add("flaky", "--max-attempts", "unlimited", "--retry-delay", "0s")

    async def work(tracker: Tracker) -> None:
        for i in range(1, RUNS + 1):
            lease = await tracker.claim("w1", "coder", 60_000)
            assert lease is not None and lease.task.id == task_id
            await tracker.add_event(lease, "progress", {"step": f"step-{i:02d}"})
            await tracker.fail(lease, f"boom-{i:02d}")

    rail.run(work)
    return task_id


def test_show_limits_runs_and_events_and_all_shows_everything(simple: Rail) -> None:
    task_id = _failing_task(simple)
    full = simple.json("task", "show", task_id)
    assert len(full["runs"]) == RUNS
    events = len(full["events"])
    assert events > 20

    out = simple.cli("task", "show", task_id)
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert f"runs (last 10 of {RUNS})" in text
    assert "2 earlier runs not shown (--runs N, or --all)" in text
    assert "boom-12" in text and "boom-03" in text
    assert "boom-02" not in text and "boom-01" not in text
    assert f"events (last 20 of {events})" in text
    assert f"{events - 20} earlier events not shown (--events N, or --all)" in text
    assert "step-12" in text and "step-01" not in text

    every = simple.cli("task", "show", task_id, "--all")
    assert every.exit_code == 0, every.output
    assert "not shown" not in every.stdout
    assert "boom-01" in every.stdout and "step-01" in every.stdout
    assert "runs (last" not in every.stdout

    some = simple.cli("task", "show", task_id, "--runs", "3", "--events", "0")
    assert "9 earlier runs not shown" in some.stdout
    assert "events not shown" not in some.stdout


def test_a_short_history_has_no_note(simple: Rail) -> None:
    task_id = simple.add("quiet")
    out = simple.cli("task", "show", task_id)
    assert out.exit_code == 0, out.output
    assert "not shown" not in out.stdout
