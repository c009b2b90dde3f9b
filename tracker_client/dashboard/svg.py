"""The dashboard's pictures, drawn on the server as inline SVG: a task's run timeline.

Each function answers the shapes (positions, sizes, labels) a template draws as ``<svg>``
elements; the template escapes every label like any other value, and no script or outside
asset is involved (the Content-Security-Policy allows neither).

Pure functions over the models: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracker_client.dashboard.render import duration, when
from tracker_client.models import Event, Run

__all__ = ["Bar", "Timeline", "timeline"]

#: Width of a drawing's plot area, and the height of one row, in SVG units.
WIDTH = 900
ROW = 22
LABEL = 170


@dataclass(frozen=True)
class Bar:
    """One run on the timeline: where it is drawn, its status (its colour) and its words."""

    x: float
    y: float
    width: float
    status: str
    label: str
    title: str


@dataclass(frozen=True)
class Tick:
    """One event on its run's row."""

    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Timeline:
    """A task's runs on one time axis, from the task's creation to its last instant."""

    width: int
    height: int
    bars: list[Bar] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    start: str = ""
    end: str = ""
    span: str = ""


def timeline(created_ms: int, runs: list[Run], events: list[Event], now_ms: int) -> Timeline:
    """The runs of a task as bars (a running one reaches ``now_ms``) and its events as ticks."""
    ends = [r.ended_at_ms or now_ms for r in runs] + [e.ts_ms for e in events]
    start = min([created_ms, *(r.started_at_ms for r in runs)])
    end = max([start + 1, *ends])
    scale = (WIDTH - LABEL - 10) / (end - start)

    def x(ms: int) -> float:
        return round(LABEL + (ms - start) * scale, 1)

    rows = {r.id: i for i, r in enumerate(runs)}
    bars = []
    for i, run in enumerate(runs):
        stop = run.ended_at_ms or now_ms
        took = duration(stop - run.started_at_ms)
        bars.append(
            Bar(
                x(run.started_at_ms),
                i * ROW + 4,
                max(2.0, round((stop - run.started_at_ms) * scale, 1)),
                run.status,
                f"attempt {run.attempt} {run.status}",
                f"attempt {run.attempt}: {run.status}, {run.agent_id}, {took}",
            )
        )
    ticks = [
        Tick(x(e.ts_ms), rows[e.run_id] * ROW + 11, f"{when(e.ts_ms)} {e.kind}")
        for e in events
        if e.run_id in rows
    ]
    return Timeline(
        WIDTH,
        max(1, len(runs)) * ROW + 20,
        bars,
        ticks,
        when(start),
        when(end),
        duration(end - start),
    )
