"""The dashboard's pictures, drawn on the server as inline SVG: a task's run timeline.

Each function answers the shapes (positions, sizes, labels) a template draws as ``<svg>``
elements; the template escapes every label like any other value, and no script or outside
asset is involved (the Content-Security-Policy allows neither).

Pure functions over the models: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
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


#: A stage box of a pipeline picture, and the gaps between boxes.
BOX_W, BOX_H, GAP_X, GAP_Y = 150, 46, 70, 24


@dataclass(frozen=True)
class Node:
    """A box: where it is, its name, its second line (a role, a count) and its kind (its
    colour: ``role``, ``human``, ``terminal``, ``task``...)."""

    x: float
    y: float
    name: str
    note: str
    kind: str
    href: str = ""


@dataclass(frozen=True)
class Edge:
    """An arrow from one box to another, with its label (a trigger) at ``lx, ly``; ``path``
    is the SVG path (a straight line, or a curve below for a move back)."""

    path: str
    label: str
    lx: float
    ly: float


@dataclass(frozen=True)
class Graph:
    """Boxes and arrows, and the drawing's size."""

    width: int
    height: int
    nodes: list[Node]
    edges: list[Edge]


def _layers(initial: str, names: list[str], moves: list[tuple[str, str, str]]) -> dict[str, int]:
    """Each stage's column: its distance from ``initial`` along the moves (unreachable ones in
    a column after the last)."""
    layer = {initial: 0} if initial in names else {}
    frontier = list(layer)
    while frontier:
        nxt = []
        for name in frontier:
            for src, dst, _ in moves:
                if src == name and dst not in layer:
                    layer[dst] = layer[name] + 1
                    nxt.append(dst)
        frontier = nxt
    last = max(layer.values(), default=-1) + 1
    for name in names:
        layer.setdefault(name, last)
    return layer


def _arrow(a: Node, b: Node, label: str, back: bool) -> Edge:
    if a.x == b.x and b.y > a.y:  # the same column, downwards: straight down
        return _arrow_down(a, b, label)
    if back or a.x == b.x:
        x1, y1 = a.x + BOX_W / 2, a.y + BOX_H
        x2, y2 = b.x + BOX_W / 2, b.y + BOX_H
        dip = max(y1, y2) + GAP_Y * 1.6
        path = f"M{x1},{y1} C{x1},{dip} {x2},{dip} {x2},{y2 + 2}"
        return Edge(path, label, (x1 + x2) / 2, dip - 4)
    x1, y1 = a.x + BOX_W, a.y + BOX_H / 2
    x2, y2 = b.x - 2, b.y + BOX_H / 2
    return Edge(f"M{x1},{y1} L{x2},{y2}", label, (x1 + x2) / 2, (y1 + y2) / 2 - 5)


def pipeline(definition: dict[str, object], counts: dict[str, int | None]) -> Graph:
    """A pipeline's state machine: a box per stage (its role or kind and its task count), an
    arrow per transition labelled with its trigger, laid out in columns from the initial
    stage."""
    states = definition.get("states")
    stages = states if isinstance(states, dict) else {}
    raw = definition.get("transitions")
    moves = [
        (str(t.get("from")), str(t.get("to")), str(t.get("trigger")))
        for t in (raw if isinstance(raw, list) else [])
        if isinstance(t, dict)
    ]
    names = list(stages)
    layer = _layers(str(definition.get("initial", "")), names, moves)
    rows: dict[int, int] = {}
    nodes: dict[str, Node] = {}
    for name in names:
        col = layer[name]
        row = rows.get(col, 0)
        rows[col] = row + 1
        spec = stages[name] if isinstance(stages[name], dict) else {}
        if spec.get("terminal"):
            kind, what = "terminal", "terminal"
        elif spec.get("human"):
            kind, what = "human", "human step"
        else:
            kind, what = "role", f"role {spec.get('agent_role', '?')}"
        count = counts.get(name)
        note = what if count is None else f"{what} · {count}"
        nodes[name] = Node(10 + col * (BOX_W + GAP_X), 10 + row * (BOX_H + GAP_Y), name, note, kind)
    edges = [
        _arrow(nodes[a], nodes[b], trigger, layer[b] <= layer[a])
        for a, b, trigger in moves
        if a in nodes and b in nodes
    ]
    cols = max(layer.values(), default=0) + 1
    height = 10 + max(rows.values(), default=1) * (BOX_H + GAP_Y) + GAP_Y * 2
    return Graph(20 + cols * (BOX_W + GAP_X) - GAP_X, height, list(nodes.values()), edges)


def relations(center: Node, up: list[Node], left: list[Node], right: list[Node]) -> Graph:
    """A task among its relations: its parent above, what it depends on to its left, its
    subtasks to its right (nodes given with names and links; placed here)."""
    col_w = BOX_W + GAP_X
    tall = max(len(left), len(right), 1)
    height = (len(up) > 0) * (BOX_H + GAP_Y) + tall * (BOX_H + GAP_Y) + 10
    top = 10 + (len(up) > 0) * (BOX_H + GAP_Y)
    placed_center = Node(10 + col_w, top, center.name, center.note, "task")
    nodes = [placed_center]
    edges: list[Edge] = []
    for parent in up[:1]:
        p = Node(10 + col_w, 10, parent.name, parent.note, parent.kind, parent.href)
        nodes.append(p)
        edges.append(_arrow_down(p, placed_center, "parent of"))
    for i, dep in enumerate(left):
        d = Node(10, top + i * (BOX_H + GAP_Y), dep.name, dep.note, dep.kind, dep.href)
        nodes.append(d)
        edges.append(_arrow(d, placed_center, "needed by", False))
    for i, child in enumerate(right):
        c = Node(
            10 + 2 * col_w,
            top + i * (BOX_H + GAP_Y),
            child.name,
            child.note,
            child.kind,
            child.href,
        )
        nodes.append(c)
        edges.append(_arrow(placed_center, c, "spawned", False))
    return Graph(20 + 3 * col_w - GAP_X, height, nodes, edges)


def _arrow_down(a: Node, b: Node, label: str) -> Edge:
    x = a.x + BOX_W / 2
    return Edge(f"M{x},{a.y + BOX_H} L{x},{b.y - 2}", label, x + 32, (a.y + BOX_H + b.y) / 2 + 4)


#: A chart's plot size and margins.
CHART_W, CHART_H, CHART_LEFT, CHART_BOTTOM = 560, 150, 44, 22


@dataclass(frozen=True)
class Column:
    """One bar segment of a chart: where, how tall, its series (its colour) and its words."""

    x: float
    y: float
    width: float
    height: float
    series: str
    title: str


@dataclass(frozen=True)
class Chart:
    """A bar chart: its columns, the y axis's top value and the x axis's first and last
    labels (or one label under each bar, ``labels``)."""

    width: int
    height: int
    columns: list[Column]
    top: str
    first: str
    last: str
    labels: list[tuple[float, str]] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)


def bars(
    buckets: list[str],
    series: dict[str, list[float]],
    *,
    unit: str = "",
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    under_each: bool = False,
) -> Chart:
    """Stacked bars, one per bucket (``series``: name -> one value per bucket, stacked in
    order); ``fmt`` writes a value (the axis top, each bar's tooltip)."""
    n = max(1, len(buckets))
    totals = [sum(values[i] for values in series.values()) for i in range(len(buckets))]
    top = max([*totals, 0.0]) or 1.0
    step = (CHART_W - CHART_LEFT - 6) / n
    columns = []
    for i, name in enumerate(buckets):
        base = float(CHART_H - CHART_BOTTOM)
        for key, values in series.items():
            value = values[i]
            if value <= 0:
                continue
            h = (CHART_H - CHART_BOTTOM - 8) * value / top
            base -= h
            wide = min(max(1.0, step - 2), 60.0) if under_each else max(1.0, step - 2)
            columns.append(
                Column(
                    round(CHART_LEFT + i * step + (step - wide) / 2, 1),
                    round(base, 1),
                    round(wide, 1),
                    round(h, 1),
                    key,
                    f"{name}: {fmt(value)}{unit} {key}",
                )
            )
    labels = (
        [(round(CHART_LEFT + (i + 0.5) * step, 1), b) for i, b in enumerate(buckets)]
        if under_each
        else []
    )
    return Chart(
        CHART_W,
        CHART_H,
        columns,
        f"{fmt(top)}{unit}",
        buckets[0] if buckets else "",
        buckets[-1] if buckets else "",
        labels,
        list(series),
    )
