"""How a finished (or still pending) task is told: the exit code and one line, shared by
``submit --wait`` and ``task show --follow`` (they exit alike for the same outcome).

No I/O: it reads the wait's answer and the clock.
"""

from __future__ import annotations

import json
from typing import Any

from tracker_client.ops_models import WaitResult
from worker.cli.ops.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_TIMEOUT,
    fmt_age,
    fmt_when,
    now_ms,
)

__all__ = ["outcome_message", "short_json"]


def short_json(data: Any, limit: int = 160) -> str:
    """Compact JSON, cut to ``limit`` characters."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def outcome_message(task_id: str, result: WaitResult, waited_s: float | None) -> tuple[int, str]:
    """The exit code and the one-line message for a wait's result."""
    task = result.task
    run = task.latest_run
    if result.outcome == "done":
        return EXIT_OK, f"task {task_id} done: stage {task.stage}"
    if result.outcome == "pending":
        if run is not None and run.status == "running":
            where = f"running in stage {task.stage!r} (attempt {run.attempt}, agent {run.agent_id})"
        elif task.next_eligible_at_ms > now_ms():
            retry = fmt_when(task.next_eligible_at_ms)
            where = f"queued in stage {task.stage!r}, retrying at {retry}"
        else:
            where = f"queued in stage {task.stage!r}"
        took = f" after {fmt_age(int((waited_s or 0) * 1000))}" if waited_s is not None else ""
        return EXIT_TIMEOUT, (
            f"timed out{took} waiting for task {task_id}; it stays {where} and may still "
            f"finish (follow it: backlog-worker task show {task_id})"
        )
    if result.outcome == "cancelled":
        return EXIT_FAILURE, f"task {task_id} was cancelled (stage {task.stage})"
    if result.outcome == "expired":
        return EXIT_FAILURE, f"task {task_id} expired before a worker finished it"
    reason = task.dead_letter_reason or "dead_lettered"
    error = f"; last error: {short_json(run.error, 200)}" if run is not None and run.error else ""
    return EXIT_FAILURE, (
        f"task {task_id} dead-lettered ({reason}) in stage {task.stage}"
        f" after {run.attempt if run else 0} attempt(s){error}"
    )
