"""The backlog extensions of the embedded rail: ``cancel``, ``cancel_all``, ``requeue`` and
``requeue_all`` (the methods of :class:`BacklogOps`, a base of ``EmbeddedTracker``; their rules
are :mod:`.backlog`'s). ``cancel``, ``cancel_all`` and ``requeue`` take an ``idempotency_key``
like the other writes: a client retrying after a lost answer (the served rail's HTTP clients)
gets the first answer instead of a ``Conflict`` (already cancelled) or a count of 0.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from pydantic import BaseModel

from tracker_client.embedded.core import TrackerCore
from tracker_client.ops_models import CancelResult, RequeueAllResult, RequeueResult
from tracker_client.rules import backlog
from tracker_client.rules.common import Ctx
from tracker_client.rules.idempotency import idempotent

__all__ = ["BacklogOps"]


class BacklogOps(TrackerCore):
    """Cancelling and requeueing tasks (backlog extensions ``cancel``, ``cancel_all``,
    ``requeue``, ``requeue_all``)."""

    async def cancel(
        self, task_id: str, *, reason: str = "cancelled", idempotency_key: str | None = None
    ) -> CancelResult:
        """Make a waiting task unclaimable, or revoke a running task's lease (a retry with the
        same ``idempotency_key`` gets the first answer)."""
        return await self._write(
            "cancel",
            lambda c: idempotent(
                c,
                idempotency_key,
                "cancel",
                [task_id, reason],
                lambda: backlog.cancel(c, task_id, reason),
                _dump,
                CancelResult.model_validate,
            ),
        )

    async def cancel_all(
        self,
        *,
        pipeline_id: str | None = None,
        role: str | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Cancel every waiting and running task of a pipeline and/or role; returns the count
        (a retry with the same ``idempotency_key`` gets the first count)."""
        return await self._write(
            "cancel_all",
            lambda c: idempotent(
                c,
                idempotency_key,
                "cancel_all",
                [pipeline_id, role],
                lambda: backlog.cancel_all(c, pipeline_id, role),
                int,
                int,
            ),
        )

    async def requeue(
        self,
        task_id: str,
        *,
        stage: str | None = None,
        reset_attempts: bool = True,
        idempotency_key: str | None = None,
    ) -> RequeueResult:
        """Bring a dead-lettered or cancelled task back to ``stage`` (default: where it was);
        a retry with the same ``idempotency_key`` gets the first answer."""
        return await self._write(
            "requeue",
            lambda c: idempotent(
                c,
                idempotency_key,
                "requeue",
                [task_id, stage, reset_attempts],
                lambda: backlog.requeue(c, task_id, stage, reset_attempts),
                _dump,
                RequeueResult.model_validate,
            ),
        )

    async def requeue_all(
        self,
        *,
        pipeline_id: str,
        reason: str | None = None,
        since_ms: int | None = None,
        stage: str | None = None,
        dry_run: bool = False,
        reset_attempts: bool = True,
    ) -> RequeueAllResult:
        """Requeue every dead-lettered task of a pipeline (dead-lettered for ``reason``, within
        the last ``since_ms``), each as :meth:`requeue` would, a bounded batch per transaction;
        ``dry_run`` only counts. The input is checked before anything is written."""

        def check(c: Ctx) -> tuple[backlog.DeadLetters, dict[str, int]]:
            chosen = backlog.dead_letters(c, pipeline_id, reason, since_ms, stage)
            return chosen, backlog.count_dead_letters(c, chosen)

        chosen, counted = await self._read("requeue_all", check)
        done, batches = Counter(counted if dry_run else {}), 0
        after: int | None = 0
        while not dry_run and after is not None:
            job = functools.partial(
                backlog.requeue_batch, chosen=chosen, after_seq=after, reset_attempts=reset_attempts
            )
            batch, after = await self._write("requeue_all", job)
            done.update(batch)
            batches += 1
        return RequeueAllResult(
            pipeline_id=pipeline_id,
            requeued=sum(done.values()),
            by_reason=dict(sorted(done.items())),
            dry_run=bool(dry_run),
            batches=batches,
        )


def _dump(answer: BaseModel) -> dict[str, Any]:
    """An answer model as its idempotency record stores it (JSON)."""
    return answer.model_dump(mode="json")
