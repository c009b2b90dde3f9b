"""``backlog-worker queue [--watch]``: per-role backlog figures, once or as a live view.

It may touch the tracker (``queue_stats`` and ``health``: reads only) and the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import click
from rich import box
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tracker_client import calls
from tracker_client.errors import Unsupported
from tracker_client.models import Health, QueueStats
from tracker_client.protocol import Tracker
from tracker_client.schedule_models import RateLimit
from worker.cli.ops.common import (
    DurationType,
    OpsContext,
    common_options,
    fmt_age,
    fmt_ms,
)

__all__ = ["LEGEND", "legend", "queue", "render_queue"]


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def _compact(value: int | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000 and value % 1000 == 0:
        return f"{value // 1000}k"
    return str(value)


#: One line per column of the queue table, in column order (each fits 80 columns).
LEGEND = (
    "role: the agent role of the stages counted",
    "waiting: tasks in its stages without a live lease (incl. scheduled, blocked)",
    "ready: waiting tasks claimable now (eligible, dependencies done, key free)",
    "running: live leases",
    "failed: failed runs of its tasks, all time",
    "dead: tasks dead-lettered or cancelled from its stages",
    "oldest: age of the oldest ready task",
    "expiring: live leases with under a third of their TTL left (missed a heartbeat)",
    "stuck: runs started over {stuck} ago and still running",
    "cap: waiting tasks allowed before adding more fails (none = unlimited)",
)


def legend(near_expiry_ms: int | None = None, stuck_ms: int = 300_000) -> list[str]:
    """The legend lines, with the windows this view used."""
    lines = [line.format(stuck=fmt_age(stuck_ms)) for line in LEGEND]
    if near_expiry_ms is not None:
        lines[7] = f"expiring: live leases ending within {fmt_age(near_expiry_ms)}"
    return lines


def _limit(limit: RateLimit, stats: QueueStats) -> str:
    """One role's limit and whether it holds its ready tasks back now."""
    parts = [limit.rate] if limit.rate else []
    if limit.max_running is not None:
        parts.append(f"max {limit.max_running} running")
    ready = next((r.claimable_count for r in stats.roles if r.role == limit.role), 0)
    at_cap = limit.max_running is not None and limit.running >= limit.max_running
    out_of_tokens = limit.rate is not None and (limit.tokens or 0) < 1
    if ready and (at_cap or out_of_tokens):
        when = f", next token {fmt_ms(limit.next_token_at_ms)}" if out_of_tokens else ""
        parts.append(f"holding {ready} ready back{when}")
    return f"{limit.role} {' '.join(parts)}"


async def rate_limits(tracker: Tracker) -> list[RateLimit]:
    """The rail's rate limits; none where the tracker has no such extension (NullTickets)."""
    try:
        found = await calls.LIST_RATE_LIMITS.call(tracker)
    except Unsupported:
        return []
    return found


def _spend(stats: QueueStats) -> str | None:
    """The budgets line (docs/operate/budgets.md): the cost reported by each role's open tasks
    and its tasks stopped by a budget; None when there is none to show."""
    spent = []
    stopped = []
    for r in stats.roles:
        cost = []
        if r.spent_usd:
            cost.append(f"{r.spent_usd:.2f} USD")
        if r.spent_tokens:
            cost.append(f"{r.spent_tokens} tokens")
        if cost:
            spent.append(f"{r.role} {' '.join(cost)}")
        if r.budget_stopped_count:
            stopped.append(f"{r.role} {r.budget_stopped_count}")
    if not spent and not stopped:
        return None
    line = "spend of open tasks: " + (", ".join(spent) or "none")
    if stopped:
        line += "; stopped by a budget: " + ", ".join(stopped)
    return line


def render_queue(
    stats: QueueStats,
    health: Health | None = None,
    *,
    legend_lines: list[str] | None = None,
    limits: Sequence[RateLimit] = (),
) -> RenderableType:
    """The per-role table of a :class:`QueueStats`, its legend, the census of ``health``, and
    the fleet-wide rate limits and caps (``limits``) holding roles back."""
    table = Table(
        title=f"queue at {fmt_ms(stats.generated_at_ms)}",
        box=box.SIMPLE_HEAD,
        padding=0,  # ten columns: the box's own separators are enough to fit 80 columns
    )
    table.add_column("role", no_wrap=True)
    for col in ("waiting", "ready", "running", "failed", "dead", "oldest", "expiring", "stuck"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("cap", justify="right", no_wrap=True)
    for r in stats.roles:
        cap = r.max_backlog_depth
        table.add_row(
            r.role,
            _num(r.waiting_count),
            str(r.claimable_count),
            _num(r.running_count),
            str(r.failed_count),
            _num(r.dead_letter_count),
            fmt_age(r.oldest_claimable_age_ms),
            str(r.near_expiry_leases),
            str(r.stuck_count),
            "none" if cap == 0 else _compact(cap),
        )
    parts: list[RenderableType] = [table]
    scheduled = [r for r in stats.roles if r.scheduled_count]
    if scheduled:
        # Delayed tasks not due yet (counted in "waiting", never in "ready"): a line, not an
        # eleventh column, so the table still fits 80 columns.
        parts.append(
            "scheduled (delayed, not due yet): "
            + ", ".join(
                f"{r.role} {r.scheduled_count}"
                + (f" (next {fmt_ms(r.next_scheduled_at_ms)})" if r.next_scheduled_at_ms else "")
                for r in scheduled
            )
        )
    if limits:
        parts.append("rate-limited (fleet-wide): " + ", ".join(_limit(x, stats) for x in limits))
    spend = _spend(stats)
    if spend:
        parts.append(spend)
    if not stats.roles:
        parts.append("no roles yet: create a pipeline first")
    if health is not None and health.tasks_by_stage:
        census = "  ".join(f"{s.stage} {s.count}" for s in health.tasks_by_stage)
        parts.append(f"tasks by stage: {census}; active leases: {health.active_leases}")
    if legend_lines and stats.roles:
        parts.append(Text("\n".join(legend_lines), style="dim"))
    return Group(*parts)


@click.command("queue", short_help="Per-role backlog figures, once or live (--watch).")
@click.option("--watch", "-w", is_flag=True, help="Keep refreshing (Ctrl-C to stop).")
@click.option(
    "--interval", type=DurationType(), default="2s", show_default=True, help="Watch refresh."
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=None,
    help="With --watch: stop after this many refreshes.",
)
@click.option(
    "--near-expiry",
    type=DurationType(),
    default=None,
    help="A lease ending within this counts as expiring. Default: less than a third of its "
    "own TTL is left, i.e. it missed a heartbeat (over HTTP, where the API takes one window: "
    "20s, a third of the default TTL).",
)
@click.option("--no-legend", is_flag=True, help="Print the table without the column legend.")
@click.option(
    "--stuck",
    type=DurationType(),
    default="5m",
    show_default=True,
    help="A run started this long ago and still running counts as stuck.",
)
@common_options
def queue(
    watch: bool,
    interval: float,
    iterations: int | None,
    near_expiry: float | None,
    no_legend: bool,
    stuck: float,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Per-role figures: waiting, ready, running, failed, dead, oldest ready, expiring, stuck.

    With --json and --watch, prints one JSON object per line per refresh.
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    near_ms = None if near_expiry is None else int(near_expiry * 1000)
    stuck_ms = int(stuck * 1000)

    async def stats(tracker: Tracker) -> QueueStats:
        return await tracker.queue_stats(near_expiry_ms=near_ms, stuck_ms=stuck_ms)

    async def view(tracker: Tracker) -> RenderableType:
        lines = None if no_legend else legend(near_ms, stuck_ms)
        return render_queue(
            await stats(tracker),
            await tracker.health(),
            legend_lines=lines,
            limits=await rate_limits(tracker),
        )

    async def once(tracker: Tracker) -> int:
        if ops.as_json:
            ops.emit_json(await stats(tracker))
        else:
            ops.print(await view(tracker))
        return 0

    async def watching(tracker: Tracker) -> int:
        count = 0
        if ops.as_json or not ops.console.is_terminal:
            while iterations is None or count < iterations:
                if ops.as_json:
                    ops.emit_json(await stats(tracker), compact=True)
                else:
                    ops.print(await view(tracker))
                count += 1
                if iterations is None or count < iterations:
                    await anyio.sleep(interval)
            return 0
        with Live(console=ops.console, auto_refresh=False) as live:
            while iterations is None or count < iterations:
                live.update(await view(tracker), refresh=True)
                count += 1
                if iterations is None or count < iterations:
                    await anyio.sleep(interval)
        return 0

    ops.run(
        watching if watch else once,
        interrupted=lambda: "stopped",
        interrupt_exit=0 if watch else 130,
    )
