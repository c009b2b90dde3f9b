"""Pick and open a :class:`~tracker_client.protocol.Tracker` from a URL.

* ``sqlite:///abs/path/backlog.db``, ``sqlite://relative.db``, ``sqlite:///./relative.db``,
  ``sqlite:///:memory:`` or a bare filesystem path -> the embedded tracker. Query parameters
  become options, e.g. ``sqlite:///var/lib/backlog-worker/rail.db?synchronous=FULL&max_backlog_depth=5000``.
* ``http://host:port`` / ``https://...`` -> the NullTickets client (``api_token`` is the admin
  bearer token; the options of :class:`~tracker_client.nulltickets.options.ClientOptionArgs`,
  also as query parameters, e.g. ``http://host:7700?timeout_s=5&retry_attempts=3``). It tries
  each call once unless ``retry=`` (or a ``retry_*`` option) asks for retries.

* ``postgresql://user@host:port/db?schema=..&pool_size=..&statement_timeout_ms=..`` (or
  ``postgres://``) -> the PostgreSQL rail (:mod:`tracker_client.postgres`, the ``postgres``
  extra), with the embedded rail's options too.

It may touch the embedded tracker (:mod:`tracker_client.embedded`) and the NullTickets client
(:mod:`tracker_client.nulltickets.client`), each imported only when a URL names it, and the rail's
file (:func:`require_rail` checks it exists and is not empty).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from tracker_client.errors import ConfigError, NoRail
from tracker_client.extras import missing
from tracker_client.protocol import Tracker

if TYPE_CHECKING:
    from tracker_client.nulltickets.options import RetrySettings
    from tracker_client.sweeps import SweepCounts

__all__ = ["URL_FORMS", "open_tracker", "parse_sqlite_url", "require_rail"]

#: Every form of a tracker URL, in one line: the help of every ``--tracker`` option and the
#: error for an unknown scheme say it in these words.
URL_FORMS = (
    "sqlite:///path/rail.db (a rail file on this host), http(s)://host:port (a served rail or "
    "a NullTickets server), postgresql://user@host:port/db (a PostgreSQL rail, the postgres extra)"
)


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


def _embedded(url: str) -> bool:
    scheme = urlsplit(url).scheme.lower()
    return scheme in ("sqlite", "") or url.startswith("/") or url.startswith(".")


def require_rail(url: str) -> None:
    """``NoRail`` when ``url`` names an embedded rail file that is missing or empty.

    An empty file is no rail either: opening it would turn it into one (keeping whatever mode
    it was created with). Other trackers (``http://``, ``:memory:``) always pass.
    """
    if urlsplit(url).scheme.lower() in ("http", "https") or not _embedded(url):
        return
    path, _ = parse_sqlite_url(url)
    if path == ":memory:":
        return
    try:
        empty = Path(path).stat().st_size == 0
    except FileNotFoundError:
        empty = True
    except OSError:
        return  # the open names the real problem (permissions...)
    if empty:
        shown, then = re.sub(r"^/{2,}", "/", path), ":"
        if not shown.startswith("/"):
            # a path in a config file is the working directory's too (not the file's directory's)
            shown = (
                f"{shown}, which is {os.path.abspath(shown)}: a relative rail path is the working "
                f"directory's ({os.getcwd()}), in a config file too; an absolute one "
                "(sqlite:///abs/path.db) names the same rail wherever the command starts"
            )
            then = ";"
        raise NoRail(
            f"no rail at {shown}{then} check the tracker url (or create it with `backlog-worker "
            "pipeline create`)"
        )


async def open_tracker(
    url: str,
    *,
    api_token: str | None = None,
    create: bool = True,
    retry: RetrySettings | None = None,
    request_timeout_s: float | None = None,
    sweeps: SweepCounts | None = None,
    **options: Any,
) -> Tracker:
    """Open the tracker ``url`` names. The caller owns it and must ``await tracker.aclose()``.

    ``create=False``: an embedded rail file that is missing or empty is ``NoRail`` instead of
    becoming a new rail (every command but ``pipeline create``). ``retry``: how a remote
    tracker retries a transient failure (``retry_*`` options and URL parameters override single
    fields; None: it tries once); ``request_timeout_s``: a remote tracker's per-request timeout
    unless a ``timeout_s`` option says otherwise. An embedded tracker answers in process and
    ignores both. ``sweeps``: where a rail opened here (SQLite, PostgreSQL) counts the expired
    leases it reclaims, whichever operation sweeps them (:mod:`tracker_client.sweeps`); a remote
    tracker's server sweeps and counts them itself (its ``/metrics``).
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        from tracker_client.nulltickets.client import RemoteTracker

        if retry is not None:
            options["retry"] = retry
        if request_timeout_s is not None:
            options.setdefault("timeout_s", request_timeout_s)
        return RemoteTracker(url, api_token=api_token, **options)
    if _embedded(url):
        from tracker_client.embedded import EmbeddedTracker

        if not create:
            require_rail(url)
        path, url_options = parse_sqlite_url(url)
        return await EmbeddedTracker.open(path, sweeps=sweeps, **{**url_options, **options})
    if scheme in ("postgresql", "postgres"):
        try:
            from tracker_client.postgres.tracker import PostgresTracker
        except ImportError as exc:
            raise missing(
                "postgres", f"tracker url {scheme}://... (the PostgreSQL rail)", exc
            ) from exc
        return await PostgresTracker.open(url, sweeps=sweeps, **options)
    from tracker_client.urlmask import mask_url  # an error's path only (issue 31, memory)

    raise ConfigError(f"tracker url {mask_url(url)!r}: unknown scheme {scheme!r} (use {URL_FORMS})")
