"""Pick and open a :class:`~tracker_client.protocol.Tracker` from a URL.

* ``sqlite:///abs/path/backlog.db``, ``sqlite://relative.db``, ``sqlite:///./relative.db``,
  ``sqlite:///:memory:`` or a bare filesystem path -> the embedded tracker. Query parameters
  become options, e.g. ``sqlite:///var/lib/backlog-worker/rail.db?synchronous=FULL&max_backlog_depth=5000``.
* ``http://host:port`` / ``https://...`` -> the NullTickets client (``api_token`` is the admin
  bearer token).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tracker_client.errors import ConfigError
from tracker_client.protocol import Tracker

__all__ = ["open_tracker", "parse_sqlite_url"]


def parse_sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    """Split an embedded-tracker URL into (database path, options). Raises ``ConfigError``."""
    raw = url
    if url.startswith("sqlite://"):
        url = url[len("sqlite://") :]
    path, _, query = url.partition("?")
    if not path:
        raise ConfigError(f"tracker url {raw!r} names no database file")
    if path.startswith("/:memory:"):
        path = ":memory:"
    elif path.startswith(("/./", "/../")):
        # sqlite:///./rail.db names a path relative to the working directory, not /rail.db.
        path = path[1:]
    return path, dict(parse_qsl(query, keep_blank_values=True))


async def open_tracker(url: str, *, api_token: str | None = None, **options: Any) -> Tracker:
    """Open the tracker ``url`` names. The caller owns it and must ``await tracker.aclose()``."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        from tracker_client.remote import RemoteTracker

        return RemoteTracker(url, api_token=api_token, **options)
    if scheme in ("sqlite", "") or url.startswith("/") or url.startswith("."):
        from tracker_client.embedded import EmbeddedTracker

        path, url_options = parse_sqlite_url(url)
        return await EmbeddedTracker.open(path, **{**url_options, **options})
    raise ConfigError(
        f"tracker url {url!r}: unknown scheme {scheme!r} (use sqlite:///path.db or http://host:port)"
    )
