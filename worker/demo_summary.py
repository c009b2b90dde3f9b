"""The demo's summary: what happened, computed from the rail after the run, as a table or JSON.

Split from :mod:`worker.demo` (the run itself).

It may touch the tracker (reads only: each task's runs and events) and builds rich tables; it prints
nothing itself.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from tracker_client.models import Task
from tracker_client.protocol import Tracker

__all__ = ["DemoSummary", "render_summary", "summarise"]


@dataclass
class DemoSummary:
    """What happened, computed from the rail after the run."""

    tasks: int = 0
    done: int = 0
    dead_lettered: int = 0
    retried_tasks: int = 0
    failed_runs: int = 0
    rejected_tasks: int = 0
    runs: int = 0
    runs_by_worker: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    #: From task creation to the first claim (worker processes starting up).
    startup_s: float = 0.0
    #: From the first claim to the last run's end: the work itself.
    working_s: float = 0.0

    @property
    def finished(self) -> int:
        """Tasks that reached a final stage."""
        return self.done + self.dead_lettered

    @property
    def throughput(self) -> float:
        """Finished tasks per second while working (the whole run when nothing was claimed)."""
        window = self.working_s or self.elapsed_s
        return self.finished / window if window > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON values (``demo --json``): the table's rows, by name."""
        return {
            "tasks": self.tasks,
            "done": self.done,
            "retried_tasks": self.retried_tasks,
            "failed_runs": self.failed_runs,
            "rejected_tasks": self.rejected_tasks,
            "dead_lettered": self.dead_lettered,
            "runs": self.runs,
            "runs_by_worker": dict(sorted(self.runs_by_worker.items())),
            "elapsed_s": round(self.elapsed_s, 3),
            "startup_s": round(self.startup_s, 3),
            "working_s": round(self.working_s, 3),
            "throughput_tasks_per_s": round(self.throughput, 3),
        }


async def summarise(tracker: Tracker, tasks: list[Task], elapsed: float) -> DemoSummary:
    """What happened to ``tasks`` (their runs and events), ``elapsed`` seconds in all."""
    summary = DemoSummary(tasks=len(tasks), elapsed_s=elapsed)
    starts: list[int] = []
    ends: list[int] = []
    for task in tasks:
        if task.dead_letter_reason is not None:
            summary.dead_lettered += 1
        elif task.stage == "done":
            summary.done += 1
        runs = await tracker.list_runs(task.id)
        failed = sum(1 for r in runs if r.status == "failed")
        summary.runs += len(runs)
        summary.failed_runs += failed
        summary.runs_by_worker.update(r.agent_id for r in runs)
        starts += [r.started_at_ms for r in runs]
        ends += [r.ended_at_ms for r in runs if r.ended_at_ms is not None]
        if failed and task.dead_letter_reason is None:
            summary.retried_tasks += 1
        events = await tracker.list_task_events(task.id, limit=1000)
        if any(
            e.kind == "transition"
            and isinstance(e.data, dict)
            and e.data.get("trigger") == "reject"
            for e in events.items
        ):
            summary.rejected_tasks += 1
    if starts and ends and tasks:
        summary.startup_s = max(0, min(starts) - min(t.created_at_ms for t in tasks)) / 1000
        summary.working_s = max(0, max(ends) - min(starts)) / 1000
    return summary


def render_summary(summary: DemoSummary) -> Table:
    """The summary table printed at the end of the demo."""
    table = Table(title="demo summary", show_header=False)
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    rate = summary.throughput
    rows = [
        ("tasks", summary.tasks),
        ("done", summary.done),
        ("retried after a failure", f"{summary.retried_tasks} ({summary.failed_runs} failed runs)"),
        ("rejected in review, reworked", summary.rejected_tasks),
        ("dead-lettered", summary.dead_lettered),
        ("runs", summary.runs),
        *((f"  runs by {agent}", n) for agent, n in sorted(summary.runs_by_worker.items())),
        ("time", f"{summary.elapsed_s:.1f}s"),
        ("  workers starting up", f"{summary.startup_s:.1f}s"),
        ("  first claim to last result", f"{summary.working_s:.1f}s"),
        ("throughput", f"{rate:.1f} tasks/s (while working)"),
    ]
    for key, value in rows:
        table.add_row(key, str(value))
    return table
