"""Templates and the small formatting filters of the dashboard's pages.

Jinja2 renders every page with autoescape on (``select_autoescape`` for ``.html``), so a task's
title, metadata, an event's data or an artifact's URI is always text, never markup. A page is
sent with a ``Content-Security-Policy`` that allows no script but the dashboard's own file (no
inline script, no eval) and no asset from outside (the CSS is inline), and
``X-Frame-Options: DENY``: even a value that escaped the templates could not run.

It may touch the template files beside it and nothing else (no tracker, no I/O per request).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

__all__ = ["HEADERS", "ago", "duration", "page", "pretty_json", "when"]

#: Sent with every page: no script runs but the dashboard's own file (``/static/console.js``:
#: no inline script, no eval), it connects only to the dashboard (its live stream), nothing is
#: loaded from elsewhere, no framing. The
#: referrer goes to the dashboard itself only: with ``no-referrer`` a browser sends
#: ``Origin: null`` on the dashboard's own form posts, which then look cross-site
#: (:mod:`tracker_client.serve.browser`); other sites still get neither referrer nor origin.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; "
        "style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

#: Instants from here on are sentinels, not dates (``datetime`` ends at year 9999).
_YEAR_10000_MS = 253_402_300_800_000

#: The longest JSON shown for one value (an event's data, a task's metadata).
MAX_JSON_CHARS = 4000


def when(ms: int | None) -> str:
    """An epoch-ms instant as ``2026-01-02 03:04:05Z`` (``-`` for none)."""
    if not ms:
        return "-"
    if not 0 < ms < _YEAR_10000_MS:
        return "never"  # a "never eligible" sentinel (a dead-lettered task's)
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def duration(ms: int | float | None) -> str:
    """A span of milliseconds in the largest sensible unit: ``850ms``, ``12s``, ``3m 5s``."""
    if ms is None:
        return "-"
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms}ms"
    s = ms // 1000
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def ago(ms: int | None) -> str:
    """How long ago the epoch-ms instant ``ms`` was (``in 5s`` when it is ahead)."""
    if not ms:
        return "-"
    if not 0 < ms < _YEAR_10000_MS:
        return "never"
    delta = int(time.time() * 1000) - ms
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON, cut at :data:`MAX_JSON_CHARS` (the template escapes it)."""
    text = json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    if len(text) > MAX_JSON_CHARS:
        text = text[:MAX_JSON_CHARS] + f"\n... ({len(text) - MAX_JSON_CHARS} more characters)"
    return text


def nanos(ns: int | None) -> str:
    """A Unix-nanosecond instant (a span's) as :func:`when` shows milliseconds."""
    return when(ns // 1_000_000) if ns else "-"


_ENV = Environment(
    loader=PackageLoader("tracker_client.dashboard", "templates"),
    autoescape=select_autoescape(["html"], default=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters.update(when=when, duration=duration, ago=ago, json=pretty_json, nanos=nanos)


def page(template: str, context: Mapping[str, Any], *, status: int = 200) -> HTMLResponse:
    """Render ``template`` with ``context`` into an HTML response with :data:`HEADERS`."""
    html = _ENV.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=dict(HEADERS))
