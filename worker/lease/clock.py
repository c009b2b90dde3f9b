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

It may touch anyio's cancel scopes and the monotonic and wall clocks only: no tracker, no I/O.
"""

from __future__ import annotations

import time
from asyncio import get_running_loop

import anyio

__all__ = ["LocalLease", "loop_time", "safety_margin_s"]

#: The margin is this share of the TTL...
MARGIN_SHARE = 0.1
#: ... but at least this (a loaded event loop lags, an executor takes time to die) ...
MARGIN_MIN_S = 1.0
#: ... and at most this, and never more than this share of the TTL (heartbeats, due every third
#: of it, need time to get through before the deadline).
MARGIN_MAX_S = 5.0
MARGIN_MAX_SHARE = 0.25


def safety_margin_s(ttl_s: float) -> float:
    """How long before the lease's end the worker stops work under it: 10 % of the TTL, at least
    1 s and at most 5 s, never more than a quarter of the TTL (room for the claim's round trip,
    a lagging event loop and for killing the executor)."""
    return min(max(ttl_s * MARGIN_SHARE, MARGIN_MIN_S), ttl_s * MARGIN_MAX_SHARE, MARGIN_MAX_S)


def loop_time() -> float:
    """``anyio.current_time()``: read straight from the running asyncio loop, as anyio's asyncio
    backend reads it, without looking the backend up first (the lookup is most of the call's
    cost, paid a few times per run); through anyio on another backend (trio)."""
    try:
        return get_running_loop().time()
    except RuntimeError:
        return anyio.current_time()


class LocalLease:
    """The lease's end on ``anyio.current_time()``'s clock; watched scopes follow its deadline."""

    __slots__ = ("_scopes", "expires_at", "margin_s", "ttl_s")

    def __init__(self, ttl_s: float, *, sent_at: float, tracker_expires_ms: int | None) -> None:
        """A lease of ``ttl_s`` claimed at ``sent_at``; the tracker said ``tracker_expires_ms``."""
        self.ttl_s = ttl_s
        self.margin_s = safety_margin_s(ttl_s)
        self.expires_at = self._end(sent_at, tracker_expires_ms)
        self._scopes: list[anyio.CancelScope] = []

    def _end(self, sent_at: float, tracker_expires_ms: int | None) -> float:
        end = sent_at + self.ttl_s
        if tracker_expires_ms is not None:
            left = tracker_expires_ms / 1000 - time.time()
            if 0 < left < self.ttl_s:  # else: skew, or the TTL is the earlier end anyway
                end = min(end, loop_time() + left)
        return end

    @property
    def deadline(self) -> float:
        """When work under the lease must stop: its end minus the safety margin."""
        return self.expires_at - self.margin_s

    def remaining_s(self) -> float:
        """Seconds until :attr:`deadline`, never negative."""
        return max(0.0, self.deadline - loop_time())

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return loop_time() >= self.deadline

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
