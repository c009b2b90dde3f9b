"""Pieces of a run that need no run state: its log adapter, its sink, the executor call.

Split from :mod:`worker.run` to keep that module to the run's life cycle.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

import anyio

from plugins.api import ExecutionContext, Executor, Failure, Outcome, Transition
from tracker_client.models import ArtifactCreate, Lease
from worker.config import RoleConfig
from worker.retry import call_with_retry

if TYPE_CHECKING:
    from worker.run import TaskRun

__all__ = [
    "FINISH_ACTIONS",
    "TRACEBACK_TAIL_CHARS",
    "RunLog",
    "TrackerSink",
    "call_executor",
    "timeout_of",
]

#: How much of a traceback goes into an ``error`` event.
TRACEBACK_TAIL_CHARS = 4000


#: The line ending a run, by action, and its default ``outcome`` (``run_failed`` names its own:
#: ``retry_scheduled``, ``dead_lettered`` or ``failed``).
FINISH_ACTIONS: dict[str, str] = {
    "run_transitioned": "transitioned",
    "run_failed": "failed",
    "run_released": "released",
    "lease_lost": "lost",
    "report_conflict": "conflict",
    "report_failed": "report_failed",
}


class RunLog(logging.LoggerAdapter[logging.Logger]):
    """Adds the run's ids to every record and keeps the call's own ``extra`` (``action``...).

    A run's life is two lines: :meth:`claimed` (``run_start``, with the attempt and stage) and
    the one that ends it (an action of :data:`FINISH_ACTIONS`), which gets its ``outcome`` and
    ``duration_s`` (since the claim) added here. The stock adapter replaces a call's ``extra``
    with its own before Python 3.13.
    """

    def __init__(self, logger: logging.Logger, extra: dict[str, Any]) -> None:
        super().__init__(logger, extra)
        self._started = time.monotonic()

    @classmethod
    def for_lease(cls, logger: logging.Logger, lease: Lease, role: str) -> RunLog:
        """The log of the run of ``lease`` for ``role``: ids, attempt and stage on every line."""
        ids = {"task_id": lease.task.id, "run_id": lease.run.id, "role": role}
        return cls(logger, {**ids, "attempt": lease.run.attempt, "stage": lease.task.stage})

    def claimed(self) -> None:
        """The run's first line."""
        extra = self.extra or {}
        self.info(
            "task claimed at stage %s (attempt %s)",
            extra.get("stage"),
            extra.get("attempt"),
            extra={"action": "run_start"},
        )

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = {**(self.extra or {}), **kwargs.get("extra", {})}
        outcome = FINISH_ACTIONS.get(str(extra.get("action")))
        if outcome is not None:
            took = round(time.monotonic() - self._started, 3)
            extra.setdefault("outcome", outcome)
            extra["duration_s"] = took
            msg = f"{msg} (took {took:.2f}s)"
        kwargs["extra"] = extra
        return msg, kwargs


class TrackerSink:
    """ContextSink writing to the tracker under the run's lease, with bounded retries."""

    def __init__(self, run: TaskRun) -> None:
        """Write for ``run`` (its lease, retry policy and remaining lease time)."""
        self._run = run

    async def emit_events(self, events: list[tuple[str, Any]]) -> None:
        """Write events in order (each scrubbed of known secrets by the run)."""
        for kind, data in events:
            await self._run.add_event(kind, data)

    async def emit_artifact(self, artifact: ArtifactCreate) -> str:
        """Record an artifact, its kind, uri and metadata scrubbed of known secrets."""
        run = self._run
        key = run.new_key()
        scrub = run.scrub.get()
        artifact = artifact.model_copy(
            update={
                "kind": scrub.text(artifact.kind),
                "uri": scrub.text(artifact.uri),
                "meta": scrub.data(artifact.meta),
            }
        )
        return await call_with_retry(
            lambda: run.tracker.add_artifact(artifact, idempotency_key=key),
            policy=run.settings.retry,
            budget_s=run.lease_remaining_s(),
            action="add_artifact",
        )


def timeout_of(lease: Lease, role: RoleConfig) -> float | None:
    meta = lease.task.metadata
    if isinstance(meta, dict):
        value = meta.get("timeout_s")
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return role.timeout_s


async def call_executor(
    executor: Executor, ctx: ExecutionContext, limit_s: float | None
) -> Outcome:
    """Run ``executor`` on ``ctx`` (within ``limit_s``); every way it can end becomes an outcome."""
    try:
        if limit_s is None:
            outcome = await executor.execute(ctx)
        else:
            with anyio.fail_after(limit_s):
                outcome = await executor.execute(ctx)
    except TimeoutError:
        return Failure(
            reason="timeout",
            message=f"the executor did not finish within {limit_s:g}s",
            retryable=True,
        )
    except Exception as exc:  # an executor bug is a failed run, not a dead worker
        tail = "".join(traceback.format_exception(exc))[-TRACEBACK_TAIL_CHARS:]
        return Failure(
            reason="executor_error",
            message=f"{type(exc).__name__}: {exc}",
            retryable=True,
            details={"type": type(exc).__name__, "message": str(exc), "traceback": tail},
        )
    if not isinstance(outcome, Transition | Failure):
        return Failure(
            reason="bad_executor_output",
            message=f"executor returned {type(outcome).__name__}, not Transition or Failure",
            retryable=False,
        )
    return outcome
