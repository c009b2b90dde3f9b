"""Retrying tracker calls: tenacity, transient errors only, bounded by time.

Only :class:`~tracker_client.errors.TrackerUnavailable` is retried; every other tracker error is
an answer and goes straight to the caller. Backoff is exponential with full jitter between
``initial_s`` and ``max_s``; the total time is bounded by a budget (the lease's remaining time
for heartbeats and run writes, a configured ceiling for final reports). Callers pass the *same*
idempotency key on every attempt of one logical write, so a retry never applies twice.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio

from tracker_client.errors import TrackerUnavailable

__all__ = ["RetryPolicy", "call_with_retry", "idempotency_keys_needed"]

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T")
log = logging.getLogger("backlog_worker.worker")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff shape for transient tracker errors."""

    initial_s: float = 0.2
    max_s: float = 10.0


def idempotency_keys_needed(tracker: object) -> bool:
    """Whether writes to ``tracker`` need idempotency keys: unless it declares
    ``answers_can_be_lost = False`` (see :mod:`tracker_client.protocol`), they do."""
    return getattr(tracker, "answers_can_be_lost", True) is not False


def _log_retry(action: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s: tracker unavailable (%s); retry %d in %.2fs",
            action,
            exc,
            state.attempt_number,
            wait,
            extra={"action": "tracker_retry", "op": action},
        )

    return before_sleep


async def call_with_retry(
    fn: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    budget_s: float | None,
    action: str,
) -> T:
    """Call ``fn`` until it succeeds, retrying ``TrackerUnavailable`` within ``budget_s``.

    ``budget_s=None`` retries forever (used by the claim loop, which must outlive outages).
    The last ``TrackerUnavailable`` is re-raised when the budget runs out.
    """
    try:  # the common case costs one call, not a tenacity state machine
        return await fn()
    except TrackerUnavailable as exc:
        log.warning(
            "%s: tracker unavailable (%s); retrying",
            action,
            exc,
            extra={"action": "tracker_retry", "op": action},
        )
    # Imported here: the fast path above is nearly every call, and a worker on the embedded
    # tracker need never load tenacity (~0.4 MiB of its resident memory).
    from tenacity import (
        AsyncRetrying,
        retry_if_exception_type,
        stop_after_delay,
        stop_before_delay,
        wait_random_exponential,
    )

    # stop_before_delay: never start a sleep that would end past the budget.
    stop = stop_before_delay(budget_s) if budget_s is not None else stop_after_delay(math.inf)
    retrying = AsyncRetrying(
        sleep=anyio.sleep,
        stop=stop,
        wait=wait_random_exponential(multiplier=policy.initial_s, max=policy.max_s),
        retry=retry_if_exception_type(TrackerUnavailable),
        before_sleep=_log_retry(action),
        reraise=True,
    )

    async def attempt() -> T:
        # tenacity only awaits callables it recognises as coroutine functions; lambdas that
        # return a coroutine are not, so wrap them.
        return await fn()

    return await retrying(attempt)
