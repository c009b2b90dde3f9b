"""The rail over time: throughput, pickup latency, failures and dead letters per role, drawn
as SVG bar charts on the server from the rail's own data.

The rail keeps no time series and lists tasks oldest first, so the page reads a bounded sample:
the tasks created within the window (from the window's start in the listing when the rail takes
such a cursor, else from its first task), at most :data:`MAX_TASKS` of them, and every run of
each (``list_runs``). The page says the window, how many tasks and runs it read and whether it
stopped at the bound. Nothing leaves the dashboard: no outside service, no chart script.

It may touch the tracker (reads: ``list_pipelines``, ``list_tasks``, ``list_runs``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from tracker_client.dashboard import svg
from tracker_client.dashboard.auth import Viewer
from tracker_client.dashboard.data import Catalog, optional
from tracker_client.dashboard.render import duration
from tracker_client.dashboard.state import BadParam, Dashboard
from tracker_client.errors import TrackerRejected
from tracker_client.models import Run, Task
from tracker_client.protocol import Tracker

__all__ = ["MAX_TASKS", "WINDOWS", "Sample", "charts_page"]

#: Most tasks read for the charts (each costs one read of its runs).
MAX_TASKS = 500

#: Most tasks listed to find them (a rail that cannot be entered at an instant).
MAX_SCAN = 5000

#: The windows offered: name -> (its length, its bucket), in ms.
WINDOWS = {
    "1h": (3_600_000, 300_000),
    "24h": (86_400_000, 3_600_000),
    "7d": (7 * 86_400_000, 6 * 3_600_000),
}

#: How a window's bucket is said on the page.
BUCKET_WORDS = {"1h": "5 minutes", "24h": "hour", "7d": "6 hours"}


@dataclass
class Sample:
    """The tasks created in a window and their runs, as read (``cut``: stopped at the bound)."""

    since_ms: int
    tasks: list[Task] = field(default_factory=list)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    cut: bool = False

    @classmethod
    async def read(cls, tracker: Tracker, since_ms: int) -> Sample:
        """The first :data:`MAX_TASKS` tasks created since ``since_ms``, and their runs.

        The listing is entered at ``since_ms`` with a creation cursor (the instant, and any
        listed task's id: the rails compare the instant first); a rail that refuses such a
        cursor is read from its first task, at most :data:`MAX_SCAN` tasks.
        """
        sample = cls(since_ms)
        first = await tracker.list_tasks(limit=1)
        if not first.items:
            return sample
        try:
            page = await tracker.list_tasks(limit=200, cursor=f"{since_ms - 1}:{first.items[0].id}")
        except TrackerRejected:
            page = await tracker.list_tasks(limit=200)
        scanned = 0
        while True:
            scanned += len(page.items)
            fresh = [t for t in page.items if t.created_at_ms >= since_ms]
            room = MAX_TASKS - len(sample.tasks)
            sample.tasks.extend(fresh[:room])
            if page.next_cursor is None:
                break
            if len(fresh) > room or len(sample.tasks) >= MAX_TASKS or scanned >= MAX_SCAN:
                sample.cut = True
                break
            page = await tracker.list_tasks(limit=200, cursor=page.next_cursor)
        for task in sample.tasks:
            sample.runs[task.id] = await optional(partial(tracker.list_runs, task.id)) or []
        return sample


def _buckets(since_ms: int, now_ms: int, step_ms: int) -> list[int]:
    return list(range(since_ms - since_ms % step_ms, now_ms + 1, step_ms))


def _label(ms: int, step_ms: int) -> str:
    stamp = time.gmtime(ms / 1000)
    return time.strftime("%H:%M" if step_ms < 3_600_000 else "%m-%d %H:%M", stamp)


def build(sample: Sample, catalog: Catalog, now_ms: int, step_ms: int) -> dict[str, svg.Chart]:
    """The four charts of a sample: runs ended per bucket (done/failed), the median and
    slowest pickup (creation or last eligibility to a run's start), failed and expired runs,
    and dead letters per role."""
    starts = _buckets(sample.since_ms, now_ms, step_ms)
    names = [_label(s, step_ms) for s in starts]

    def slot(ms: int) -> int | None:
        i = (ms - starts[0]) // step_ms
        return i if 0 <= i < len(starts) else None

    ended = {"completed": [0.0] * len(starts), "failed": [0.0] * len(starts)}
    failures = {"failed": [0.0] * len(starts), "stale": [0.0] * len(starts)}
    waits: list[list[float]] = [[] for _ in starts]
    dead: dict[str, float] = {}
    for task in sample.tasks:
        runs = sorted(sample.runs.get(task.id, []), key=lambda r: r.attempt)
        for run in runs:
            if run.ended_at_ms is not None and (i := slot(run.ended_at_ms)) is not None:
                ok = run.status == "completed"
                ended["completed" if ok else "failed"][i] += 1
                if run.status in failures:
                    failures[run.status][i] += 1
        if runs and (i := slot(runs[0].started_at_ms)) is not None:
            ready = task.run_at_ms or task.created_at_ms
            waits[i].append(max(0, runs[0].started_at_ms - ready))
        if task.dead_letter_reason:
            role = catalog.stage(task.pipeline_id, task.stage).get("agent_role")
            key = str(role) if role else f"{task.stage} (no role)"
            dead[key] = dead.get(key, 0) + 1
    # A bucket with pickups keeps a visible bar though they took 0 ms (drawn as "<1 ms").
    median = [max(statistics.median(w), 0.5) if w else 0.0 for w in waits]
    slowest = [max(0.0, max(w) - m) if w else 0.0 for w, m in zip(waits, median, strict=True)]
    pickup = {"median": median, "slowest": slowest}
    roles = sorted(dead)
    return {
        "throughput": svg.bars(names, ended, unit=" runs"),
        "pickup": svg.bars(names, pickup, fmt=lambda v: "<1 ms" if v < 1 else duration(v)),
        "failures": svg.bars(names, failures, unit=" runs"),
        "dead": svg.bars(roles, {"dead-lettered": [dead[r] for r in roles]}, under_each=True),
    }


async def charts_page(request: Request, dash: Dashboard, viewer: Viewer) -> Response:
    """The rail over the chosen window (``?window=1h|24h|7d``, default 24h)."""
    window = request.query_params.get("window") or "24h"
    if window not in WINDOWS:
        raise BadParam("window", f"{window[:40]!r} is not one of {', '.join(WINDOWS)}")
    length, step = WINDOWS[window]
    now_ms = int(time.time() * 1000)
    catalog = await Catalog.read(dash.tracker)
    sample = await Sample.read(dash.tracker, now_ms - length)
    context = {
        "charts": build(sample, catalog, now_ms, step),
        "window": window,
        "windows": list(WINDOWS),
        "tasks": len(sample.tasks),
        "runs": sum(len(r) for r in sample.runs.values()),
        "cut": sample.cut,
        "max_tasks": MAX_TASKS,
        "bucket": BUCKET_WORDS[window],
    }
    return dash.render(request, viewer, "charts.html", context, section="charts")
