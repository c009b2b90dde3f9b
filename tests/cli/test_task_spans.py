"""``task show`` lists the task's OTLP spans (name under its parent, duration, status, run) on a
rail with the ``spans`` extension, embedded and served; ``--json`` has them all. A task without
spans shows no table, and a plain NullTickets rail (no ``spans`` extension) nothing more at all.
Real CLI, real SQLite rail, real HTTP for the served one."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Rail, invoke, served_in_thread
from tests.contract.otlpdocs import T0, document, span
from tests.remote.fake_nulltickets import PIPELINE, FakeNullTickets
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker, RetrySettings
from tracker_client.observe_models import Span
from tracker_client.protocol import Tracker
from worker.cli.ops.task.show import fetch_report, fmt_span_duration, span_depths

pytestmark = pytest.mark.timeout(60)


def _traced_task(rail: Rail) -> str:
    task_id = rail.add("traced")

    async def work(tracker: Tracker) -> None:
        lease = await tracker.claim("w1", "coder", 60_000)
        assert lease is not None and lease.task.id == task_id
        doc = document(
            span(
                0, "task.run", start=T0, duration_ns=2_500_000_000, task=task_id, run=lease.run.id
            ),
            span(1, "executor", start=T0 + 1_000, duration_ns=12_000_000, run=lease.run.id),
            span(2, "report", start=T0 + 2_000, duration_ns=850_000, task=task_id),
        )
        await tracker.call("ingest_traces", document=doc)
        await tracker.transition(lease, "complete")

    rail.run(work)
    return task_id


def test_show_lists_the_spans_of_the_task(simple: Rail) -> None:
    task_id = _traced_task(simple)
    out = simple.cli("task", "show", task_id)
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert "spans" in text
    table = text[text.index("spans") :].splitlines()

    def row(name: str) -> str:
        (found,) = [line for line in table if f" {name} " in line]
        return found

    assert "2.5s" in row("task.run") and "error: broke" in row("task.run")
    assert "   executor " in row("executor") and "12.0ms" in row("executor")  # under its parent
    assert " ok " in row("executor") and "#1" in row("executor")
    assert "850us" in row("report") and "error: broke" in row("report")
    shown = simple.json("task", "show", task_id)["spans"]
    assert [s["name"] for s in shown] == ["task.run", "executor", "report"]
    assert all(s["task_id"] == task_id for s in shown)


def test_a_task_without_spans_shows_no_table(simple: Rail) -> None:
    task_id = simple.add("quiet")
    out = simple.cli("task", "show", task_id)
    assert out.exit_code == 0, out.output
    assert "spans" not in out.stdout
    assert simple.json("task", "show", task_id)["spans"] == []


def test_a_served_rail_shows_them_too(simple: Rail) -> None:
    task_id = _traced_task(simple)
    with served_in_thread(simple.path) as url:
        result = invoke(["task", "show", task_id, "--tracker", url, "--json"])
    assert result.exit_code == 0, result.output
    assert [s["name"] for s in json.loads(result.stdout)["spans"]] == [
        "task.run",
        "executor",
        "report",
    ]


@pytest.mark.anyio
async def test_a_rail_without_the_spans_extension_shows_nothing_more() -> None:
    fake = FakeNullTickets()
    tracker = RemoteTracker(
        "http://127.0.0.1:7700", retry=RetrySettings(attempts=1), transport=fake.transport()
    )
    try:
        pid = await tracker.create_pipeline("p", PIPELINE)
        task_id = await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
        report = await fetch_report(tracker, task_id)
        assert report.spans is None and "spans" not in report.as_json()
        assert not any(r.url.path.endswith("/spans") for r in fake.requests)
    finally:
        await tracker.aclose()


def test_durations_and_depths() -> None:
    def at(n: int, parent: int | None, start: int | None, end: int | None) -> Span:
        return Span(
            batch_id=1,
            trace_id="a" * 32,
            span_id=f"{n:016x}",
            parent_span_id=None if parent is None else f"{parent:016x}",
            name=f"s{n}",
            start_time_unix_nano=start,
            end_time_unix_nano=end,
        )

    assert fmt_span_duration(at(1, None, 10, None)) == "-"
    assert fmt_span_duration(at(1, None, 0, 999)) == "0us"
    assert fmt_span_duration(at(1, None, 0, 75_000_000_000)) == "1m15s"
    looped = [at(1, 2, 0, 1), at(2, 1, 0, 1), at(3, 1, 0, 1), at(4, 9, 0, 1)]
    depths = span_depths(looped)  # a loop of parents ends; an unknown parent is a root
    assert depths[f"{'a' * 32}:{4:016x}"] == 0
    assert depths[f"{'a' * 32}:{3:016x}"] == 2
