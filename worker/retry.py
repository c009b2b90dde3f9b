"""Retrying tracker calls: tenacity, transient errors only, bounded by time.

This is the worker's one retry layer (the HTTP client does not retry for the worker). Writes go
through :class:`TrackerCalls`, which pairs each logical write with its idempotency key (only when
the tracker's :class:`~tracker_client.capabilities.Capabilities` say answers can be lost) and
retries it within a budget; reads use :func:`call_with_retry` directly.

Only :class:`~tracker_client.errors.TrackerUnavailable` is retried; every other tracker error is
an answer and goes straight to the caller. Backoff is exponential with full jitter between
``initial_s`` and ``max_s``; the total time is bounded by a budget (the lease's remaining time
for heartbeats and run writes, a configured ceiling for final reports). The *same* idempotency
key goes with every attempt of one logical write, so a retry never applies twice.

It may touch only the calls it is handed (a tracker method, chosen by the caller) and the rail's
capabilities and errors; it opens no tracker and knows no operation by name.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import anyio

from tracker_client.capabilities import Capabilities
from tracker_client.errors import TrackerUnavailable
from tracker_client.rules.common import new_id
from worker.telemetry import NOOP, Telemetry

__all__ = ["RetryPolicy", "TrackerCalls", "call_with_retry"]

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T")
log = logging.getLogger("backlog_worker.worker")


class RetryPolicy(NamedTuple):
    """Backoff shape for transient tracker errors."""

    initial_s: float = 0.2
    max_s: float = 10.0


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
        _log_unavailable(action, exc)
    return await _retrying(fn, policy=policy, budget_s=budget_s, action=action)


def _log_unavailable(action: str, exc: TrackerUnavailable) -> None:
    log.warning(
        "%s: tracker unavailable (%s); retrying",
        action,
        exc,
        extra={"action": "tracker_retry", "op": action},
    )


async def _retrying(
    fn: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    budget_s: float | None,
    action: str,
) -> T:
    """The retries after a first attempt that found the tracker unavailable."""
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


class TrackerCalls(NamedTuple):
    """How the worker calls its tracker: the retry policy, and whether writes carry keys.

    A write is one logical change: :meth:`write` makes its key once and sends the *same* key on
    every retry, so a lost answer replays instead of applying twice. Keys are only made when
    ``keys`` (the tracker's ``answers_can_be_lost``): on the embedded tracker a key would only
    cost a lookup and a record per write.
    """

    policy: RetryPolicy
    keys: bool = True
    #: Told of every attempt (its time and error) when enabled; the no-op costs nothing.
    telemetry: Telemetry = NOOP

    @classmethod
    def of(
        cls, capabilities: Capabilities, policy: RetryPolicy, telemetry: Telemetry = NOOP
    ) -> TrackerCalls:
        """The calls for a tracker that declared ``capabilities``."""
        return cls(policy, keys=capabilities.answers_can_be_lost, telemetry=telemetry)

    def new_key(self) -> str | None:
        """A fresh idempotency key for one logical write (None when the tracker needs none).

        Keys lead with the time (:func:`~tracker_client.rules.common.new_id`): the rail's
        idempotency index then grows at its right edge instead of writing a random page per
        write, a page seldom in memory on a rail that keeps many records
        (docs/benchmarks/retention.md)."""
        return new_id() if self.keys else None

    async def write(
        self,
        action: str,
        fn: Callable[[str | None], Awaitable[T]],
        *,
        budget_s: float | None,
    ) -> T:
        """Send ``fn(key)`` with one fresh key, retrying transient errors within ``budget_s``."""
        key = new_id() if self.keys else None
        if self.telemetry.enabled:
            return await call_with_retry(
                self._observed(action, lambda: fn(key)),
                policy=self.policy,
                budget_s=budget_s,
                action=action,
            )
        # Telemetry off (the no-op): the first attempt as a plain call, no wrapper, no closure
        # (nearly every call ends here); call_with_retry's retries only after it failed.
        try:
            return await fn(key)
        except TrackerUnavailable as exc:
            _log_unavailable(action, exc)
        return await _retrying(
            lambda: fn(key), policy=self.policy, budget_s=budget_s, action=action
        )

    async def read(
        self, action: str, fn: Callable[[], Awaitable[T]], *, budget_s: float | None
    ) -> T:
        """Call ``fn`` (a read, or a write needing no key), retried within ``budget_s``."""
        if self.telemetry.enabled:
            fn = self._observed(action, fn)
        return await call_with_retry(fn, policy=self.policy, budget_s=budget_s, action=action)

    def _observed(self, action: str, fn: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """``fn`` timed for the telemetry (``fn`` itself when it is off)."""
        telemetry = self.telemetry
        if not telemetry.enabled:
            return fn

        async def timed() -> T:
            started = time.time_ns()
            try:
                answer = await fn()
            except BaseException as exc:
                telemetry.tracker_call(
                    action, started_ns=started, ended_ns=time.time_ns(), error=exc
                )
                raise
            telemetry.tracker_call(action, started_ns=started, ended_ns=time.time_ns(), error=None)
            return answer

        return timed
