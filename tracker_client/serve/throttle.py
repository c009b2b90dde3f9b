"""Failed authentication per client: counted, throttled and logged (docs/operate/security.md).

A client that presents wrong tokens ``max_failures`` times within ``window_s`` is refused
(``429`` with ``Retry-After``) until the window has passed, before its next token is even
compared: guessing the api token or the dashboard's login then runs at a few tries a minute
per address instead of ~940 a second. Each client's first failure of a window is logged (its
address, never the token it sent), and so is the moment it is throttled; the rest of the window
is counted silently (a guesser must not flood the log). At most ``limit`` addresses are
tracked, the oldest dropped first.

The address is the TCP peer's, unless the server was told to trust a proxy's
``X-Forwarded-For`` (``--trusted-proxy``): a client never chooses the address it is counted
under.

It may touch its own table and the ``backlog_worker.server`` log; no request, no token.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

__all__ = ["AuthThrottle"]

log = logging.getLogger("backlog_worker.server")


class AuthThrottle:
    """Failed authentications per client address, with the wait a throttled one must keep."""

    def __init__(
        self,
        *,
        what: str = "api token",
        max_failures: int = 10,
        window_s: float = 60.0,
        limit: int = 1000,
    ) -> None:
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self.what = what
        self.max_failures = max_failures
        self.window_s = window_s
        self.limit = limit

    def wait_s(self, client: str) -> float:
        """Seconds ``client`` must wait before its next try (0: it may try now)."""
        count, since = self._failures.get(client, (0, 0.0))
        left = since + self.window_s - time.monotonic()
        if left <= 0:
            self._failures.pop(client, None)
            return 0.0
        return left if count >= self.max_failures else 0.0

    def failed(self, client: str) -> None:
        """Count a failed authentication of ``client`` (logged as the docstring says)."""
        now = time.monotonic()
        count, since = self._failures.pop(client, (0, now))
        if since + self.window_s <= now:
            count, since = 0, now
        count += 1
        self._failures[client] = (count, since)
        while len(self._failures) > self.limit:
            self._failures.popitem(last=False)
        if count == 1:
            log.warning(
                "failed authentication (%s) from %s",
                self.what,
                client,
                extra={"action": "auth_failed", "client": client},
            )
        elif count == self.max_failures:
            log.warning(
                "%d failed authentications (%s) from %s within %.0f s: refusing its tries"
                " (429) until the window has passed",
                count,
                self.what,
                client,
                self.window_s,
                extra={"action": "auth_throttled", "client": client},
            )
