"""``task show``'s spans: the OTLP spans ingested for a task (extension ``spans``), as a table.

Spans reach the rail through OTLP ingest (``POST /v1/traces``) linked to a task by their
``nulltickets.task_id`` / ``nulltickets.run_id`` attributes. On a rail without the ``spans``
extension (a plain NullTickets server stores spans but cannot list them) ``task show`` prints
nothing more and ``--json`` has no ``spans`` key.

It may touch the tracker (one read: ``list_spans``) and the terminal's table.
"""

from __future__ import annotations

from rich import box
from rich.table import Table

from tracker_client import calls
from tracker_client.errors import Unsupported
from tracker_client.models import Run
from tracker_client.observe_models import Span
from tracker_client.protocol import Tracker
from worker.cli.ops.common import fmt_age, fmt_when

__all__ = ["fetch_spans", "fmt_span_duration", "render_spans", "span_depths"]

#: Deepest indentation of a child span under its parent in the table.
_MAX_INDENT = 8
_STATUS = {0: "-", 1: "ok", 2: "error"}


async def fetch_spans(tracker: Tracker, task_id: str) -> list[Span] | None:
    """The task's spans by start time, or None when the rail has no ``spans`` extension."""
    if "spans" not in (await tracker.capabilities()).extensions:
        return None
    try:
        spans = await calls.LIST_SPANS.call(tracker, task_id)
    except Unsupported:
        return None
    return spans


def fmt_span_duration(span: Span) -> str:
    """How long the span took (``850us``, ``12.5ms``, ``4.2s``), ``-`` without both ends."""
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start is None or end is None:
        return "-"
    ns = max(0, end - start)
    if ns < 1_000_000:
        return f"{ns // 1000}us"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.1f}ms"
    return fmt_age(ns // 1_000_000)


def span_depths(spans: list[Span]) -> dict[str, int]:
    """Each span's depth under its ancestors among ``spans`` (a root, or a span whose parent
    is not shown, is 0), by ``trace_id:span_id``."""
    by_id = {f"{s.trace_id}:{s.span_id}": s for s in spans}
    depths: dict[str, int] = {}
    for key, span in by_id.items():
        depth, seen, parent = 0, {key}, span.parent_span_id
        while parent is not None and depth < _MAX_INDENT:
            up = f"{span.trace_id}:{parent}"
            if up in seen or up not in by_id:
                break
            seen.add(up)
            depth += 1
            parent = by_id[up].parent_span_id
        depths[key] = depth
    return depths


def render_spans(spans: list[Span], runs: list[Run]) -> Table:
    """The spans table: start, name (indented under its parent), duration, status, run."""
    attempt = {r.id: r.attempt for r in runs}
    depths = span_depths(spans)
    table = Table(title="spans", box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
    table.add_column("start", no_wrap=True)
    table.add_column("name", overflow="fold", ratio=1)
    for col in ("took", "status", "run"):
        table.add_column(col, no_wrap=True)
    for s in spans:
        start = None if s.start_time_unix_nano is None else s.start_time_unix_nano // 1_000_000
        status = _STATUS.get(s.status_code or 0, str(s.status_code))
        if s.status_message:
            status = f"{status}: {s.status_message}"
        run = "-" if s.run_id is None else (f"#{attempt[s.run_id]}" if s.run_id in attempt else "?")
        indent = "  " * depths.get(f"{s.trace_id}:{s.span_id}", 0)
        table.add_row(fmt_when(start), indent + s.name, fmt_span_duration(s), status, run)
    return table
