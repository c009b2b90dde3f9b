"""What the NullTickets client puts on the wire and reads off it: JSON bodies and query strings.

Values are checked to be plain JSON before a request is built (:func:`check_json`), serialised
once to the bytes every retry sends again (:func:`dumps`), query strings are encoded the way the
server reads them (:func:`encode_query`), and a success body is parsed (:func:`loads`). These
are pure functions over values and bytes: the client's parts call them while they shape a
request or read its answer, apart from :mod:`~tracker_client.nulltickets.transport`, which sends
the bytes and knows nothing of what they say.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tracker_client.errors import TrackerUnavailable, ValidationFailed
from tracker_client.jsonlimits import check_json_limits

if TYPE_CHECKING:
    import httpx

__all__ = ["check_json", "dumps", "encode_query", "loads"]


def encode_query(params: Mapping[str, object | None]) -> str:
    """Build a query string the way the server can read it.

    NullTickets does not percent-decode query values on ``/tasks``, ``/artifacts`` and
    ``/runs/{id}/events``, so ``:`` in cursors must travel as-is (httpx would send ``%3A`` and the
    server would answer ``invalid_cursor``). Only characters that would break the query are
    escaped. None values are left out.
    """
    parts = []
    for key, value in params.items():
        if value is None:
            continue
        parts.append(f"{key}={quote(str(value), safe=':@-._~!$()*,;/')}")
    return "&".join(parts)


def check_json(value: Any, what: str) -> Any:
    """Refuse (``ValidationFailed`` naming ``what``) a value that is not plain JSON.

    Sets, bytes, arbitrary objects and NaN would otherwise be coerced or fail mid-request; a
    value nested past :data:`~tracker_client.jsonlimits.MAX_JSON_DEPTH` is refused here as the
    served tracker would refuse it (and before it could overflow the encoder).
    """
    check_json_limits(value, what)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(f"{what} must be JSON: {exc}", code="invalid_json") from exc
    return value


def dumps(value: Any) -> bytes:
    """Compact, deterministic JSON bytes (a retry must send identical bytes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def loads(response: httpx.Response, what: str) -> Any:
    """Parse a success body; a body that is not JSON is a transient, broken answer."""
    try:
        return json.loads(response.content)
    except ValueError as exc:
        raise TrackerUnavailable(
            f"{what}: the tracker answered {response.status_code} with a body that is not JSON",
            code="invalid_response",
        ) from exc
