"""The embedded tracker's face of the ``rate_limits`` extension: set, list and clear.

The rules (token buckets, caps, what a claim spends) are :mod:`.ratelimits`'; this mixin only
runs them in the tracker's transactions, so the claim path can use the rules without importing
the tracker core.
"""

from __future__ import annotations

from tracker_client.embedded.core import TrackerCore
from tracker_client.rules.ratelimits import clear_limit, list_limits, set_limit
from tracker_client.schedule_models import RateLimit

__all__ = ["RateLimitOps"]


class RateLimitOps(TrackerCore):
    """The tracker's face of the ``rate_limits`` extension: set, list and clear."""

    async def set_rate_limit(
        self, role: str, *, rate: str | None = None, max_running: int | None = None
    ) -> RateLimit:
        """Set ``role``'s fleet-wide rate (``"20/min"``) and/or cap of leased tasks."""
        return await self._write("set_rate_limit", lambda c: set_limit(c, role, rate, max_running))

    async def list_rate_limits(self) -> list[RateLimit]:
        """Every role's limit, by role, with its tokens, next token and leased tasks."""
        return await self._read("list_rate_limits", list_limits)

    async def clear_rate_limit(self, role: str) -> RateLimit:
        """Remove ``role``'s limit: its claims are no longer limited."""
        return await self._write("clear_rate_limit", lambda c: clear_limit(c, role))
