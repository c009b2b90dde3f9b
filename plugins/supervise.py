"""The executor call: its time limit, and how every way it can end becomes an outcome.

One place for the worker and the plugin test harness (:mod:`plugins.testing`), so an executor
author sees in a test the very reason and message a worker would record: a timeout is
``timeout`` ("the executor did not finish within 2s"), an exception ``executor_error``
("RuntimeError: kaboom", with its traceback's tail in the details), a return value that is no
outcome ``bad_executor_output``. Cancellation from outside (a lost lease, a shutdown, the
harness's ``cancel()``) is not mapped here: it propagates, and the caller names it.

It lives with the plugins (the worker imports it, not the other way round) and may touch the
plugin API only: no tracker, no lease.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

import anyio

from plugins.api import ExecutionContext, Executor, Failure, Outcome, Transition
from tracker_client.errors import ExecutorError
from tracker_client.models import Task

__all__ = [
    "TRACEBACK_TAIL_CHARS",
    "bad_output_failure",
    "call_executor",
    "error_failure",
    "timeout_failure",
    "timeout_of",
]

#: How much of a traceback goes into an ``error`` event.
TRACEBACK_TAIL_CHARS = 4000


def timeout_of(task: Task, role_timeout_s: float | None) -> float | None:
    """The task's time limit: its ``metadata.timeout_s`` when positive, else the role's."""
    meta = task.metadata
    if not meta:  # most tasks: no metadata to look into
        return role_timeout_s
    if isinstance(meta, Mapping):
        value = meta.get("timeout_s")
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return role_timeout_s


def timeout_failure(limit_s: float) -> Failure:
    """The run's failure when the executor overran ``limit_s`` (retried)."""
    return Failure(
        reason="timeout",
        message=f"the executor did not finish within {limit_s:g}s",
        retryable=True,
    )


def error_failure(exc: Exception) -> Failure:
    """The run's failure when the executor raised ``exc``: a bug is a failed run (retried),
    not a dead worker."""
    tail = "".join(traceback.format_exception(exc))[-TRACEBACK_TAIL_CHARS:]
    return Failure(
        reason="executor_error",
        message=f"{type(exc).__name__}: {exc}",
        retryable=True,
        details={"type": type(exc).__name__, "message": str(exc), "traceback": tail},
    )


def bad_output_failure(executor: Executor, outcome: Any) -> Failure:
    """The run's failure when ``execute`` returned something that is no outcome (not retried:
    it would return the same again)."""
    return Failure(
        reason="bad_executor_output",
        message=(
            f"{type(executor).__name__}.execute returned {type(outcome).__name__}, "
            "not Transition or Failure"
        ),
        retryable=False,
    )


async def call_executor(
    executor: Executor,
    ctx: ExecutionContext,
    limit_s: float | None,
    *,
    raise_errors: bool = False,
) -> Outcome:
    """Run ``executor`` on ``ctx`` (within ``limit_s``); every way it can end becomes an outcome.

    ``raise_errors`` (the harness's default): an exception of the executor propagates, and a
    return value that is no outcome raises ``ExecutorError`` with the failure's message, so a
    test sees the traceback instead of a failed run.
    """
    try:
        if limit_s is None:
            outcome = await executor.execute(ctx)
        else:
            with anyio.fail_after(limit_s):
                outcome = await executor.execute(ctx)
    except TimeoutError as exc:
        if limit_s is None:  # the executor's own TimeoutError, not our limit
            if raise_errors:
                raise
            return error_failure(exc)
        return timeout_failure(limit_s)
    except Exception as exc:
        if raise_errors:
            raise
        return error_failure(exc)
    if not isinstance(outcome, Transition | Failure):
        failure = bad_output_failure(executor, outcome)
        if raise_errors:
            raise ExecutorError(failure.message)
        return failure
    return outcome
