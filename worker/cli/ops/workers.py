"""``backlog-worker workers [--state S] [--json]``: the live workers of a rail and what they run.

The operator's face of the tracker's ``workers`` extension: every worker process registers
itself and refreshes its entry (:mod:`worker.daemon.presence`); this lists them, alive first,
with the tasks each runs now. A worker silent for longer than its ``lost_after_s`` shows as
``lost``, one that shut down cleanly as ``stopped``. It may touch the tracker (``list_workers``:
a read) and the terminal.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table
from rich.text import Text

from tracker_client import calls
from tracker_client.observe_models import WorkerInfo
from tracker_client.protocol import Tracker
from worker.cli.ops.common import OpsContext, common_options, fmt_age, now_ms

__all__ = ["STATE_STYLES", "render_workers", "workers_command"]

#: How each state is shown in the table.
STATE_STYLES = {"alive": "green", "lost": "bold red", "stopped": "dim"}
#: Task ids shown per worker before ``+N`` stands for the rest.
MAX_TASK_IDS = 3


def _tasks(worker: WorkerInfo) -> str:
    ids = [run.task_id for run in worker.running]
    if not ids:
        return "-"
    shown = ", ".join(ids[:MAX_TASK_IDS])
    return f"{shown} +{len(ids) - MAX_TASK_IDS}" if len(ids) > MAX_TASK_IDS else shown


def render_workers(workers: list[WorkerInfo], now: int | None = None) -> Table:
    """The table: id, host, pid, roles, busy/total slots, state, last seen ago, task ids."""
    at = now_ms() if now is None else now
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("id", "host", "pid", "roles", "slots", "state", "last seen", "running"):
        table.add_column(column, no_wrap=column in ("id", "state", "last seen"))
    for w in workers:
        table.add_row(
            w.id,
            w.host,
            str(w.pid),
            ", ".join(w.roles),
            f"{len(w.running)}/{w.slots}",
            Text(w.state, style=STATE_STYLES[w.state]),
            f"{fmt_age(at - w.last_seen_at_ms)} ago",
            _tasks(w),
        )
    return table


def _summary(workers: list[WorkerInfo]) -> str:
    counts = {state: sum(w.state == state for w in workers) for state in STATE_STYLES}
    parts = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
    return f"{len(workers)} worker(s): {parts}"


@click.command("workers")
@click.option(
    "--state",
    type=click.Choice(list(STATE_STYLES)),
    default=None,
    help="Only workers in this state (lost: silent longer than its lost_after_s).",
)
@common_options
def workers_command(
    state: str | None, tracker_url: str | None, config_path: Path | None, as_json: bool
) -> None:
    """The workers registered on the rail, alive first, with the tasks each runs now."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def run(tracker: Tracker) -> int:
        query = {} if state is None else {"state": state}
        workers = await calls.LIST_WORKERS.call(tracker, **query)
        empty = f"no {state} workers" if state else "no workers registered"
        ops.emit_list(workers, render_workers, empty)
        if workers and not ops.as_json:
            ops.print(_summary(workers))
        return 0

    ops.run(run)
