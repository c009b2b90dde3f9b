"""A lease's end by the worker's own clock, and the cancel scopes that must not outlive it.

A heartbeat that hangs (the tracker accepted the connection and never answers) only fails after
the request timeout, which may be far longer than the lease. So a run does not wait for the
tracker to say the lease is gone: it keeps the lease's end on its own monotonic clock and every
scope doing work under the lease (the executor, then the final report) gets that end, minus a
safety margin, as its deadline. A heartbeat that got through moves the end forward.

The end is the earlier of ``sent + ttl`` (``sent`` = when the claim or heartbeat was *started*,
so a slow answer never lengthens it) and the tracker's own ``expires_at_ms`` read against our
wall clock. A tracker clock behind ours only shortens the lease (safe); one far enough ahead to
say "already expired" is taken for clock skew and ignored.
"""

from __future__ import annotations

import time

import anyio

__all__ = ["LocalLease", "safety_margin_s"]

#: The margin is this share of the TTL...
MARGIN_SHARE = 0.1
#: ... but at least this (time to cancel an executor) and at most this many seconds.
MARGIN_MIN_S = 0.05
MARGIN_MAX_S = 5.0


def safety_margin_s(ttl_s: float) -> float:
    """How long before the lease's end the worker stops work under it: 10 % of the TTL,
    between 0.05 s and 5 s (room for the claim's round trip and for cancelling the executor)."""
    return min(max(ttl_s * MARGIN_SHARE, MARGIN_MIN_S), MARGIN_MAX_S)


class LocalLease:
    """The lease's end on ``anyio.current_time()``'s clock; watched scopes follow its deadline."""

    def __init__(self, ttl_s: float, *, sent_at: float, tracker_expires_ms: int | None) -> None:
        self.ttl_s = ttl_s
        self.margin_s = safety_margin_s(ttl_s)
        self.expires_at = self._end(sent_at, tracker_expires_ms)
        self._scopes: list[anyio.CancelScope] = []

    def _end(self, sent_at: float, tracker_expires_ms: int | None) -> float:
        end = sent_at + self.ttl_s
        if tracker_expires_ms is not None:
            left = tracker_expires_ms / 1000 - time.time()
            if left > 0:  # <= 0: already expired by our wall clock, or skew; trust the TTL
                end = min(end, anyio.current_time() + left)
        return end

    @property
    def deadline(self) -> float:
        """When work under the lease must stop: its end minus the safety margin."""
        return self.expires_at - self.margin_s

    def remaining_s(self) -> float:
        """Seconds until :attr:`deadline`, never negative."""
        return max(0.0, self.deadline - anyio.current_time())

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return anyio.current_time() >= self.deadline

    def extended(self, sent_at: float, tracker_expires_ms: int | None) -> None:
        """A heartbeat started at ``sent_at`` succeeded: move the end (and every deadline)."""
        self.expires_at = self._end(sent_at, tracker_expires_ms)
        for scope in self._scopes:
            scope.deadline = self.deadline

    def watch(self, scope: anyio.CancelScope) -> anyio.CancelScope:
        """Give ``scope`` the lease's deadline from now on; returns it."""
        scope.deadline = self.deadline
        self._scopes.append(scope)
        return scope

    def unwatch(self, scope: anyio.CancelScope) -> None:
        """Stop moving ``scope``'s deadline."""
        if scope in self._scopes:
            self._scopes.remove(scope)

    def cancel_all(self) -> None:
        """The lease is gone: cancel every watched scope."""
        for scope in self._scopes:
            scope.cancel()
