"""The error half of the wire contract: HTTP status and ``error.code`` <-> the exception tree.

One table (:data:`ERRORS`) is read in both directions: :func:`response_for` (the served tracker:
exception -> status, ``{"error":{"code","message",...}}`` body and headers) and
:func:`error_for` (the remote client: answer -> exception). A row may be one-way: the client
must also read answers our server never gives (NullTickets' 401/403 on an admin route, its 413,
any 5xx) and the server answers some exceptions the client reads back as another class (a
``TrackerRejected`` is ``400``, read as ``ValidationFailed``; a ``TrackerCorrupt`` is ``500``,
read as ``TrackerUnavailable``).

The rules the table carries (docs/guarantees/nulltickets.md, docs/reference/http-api.md):

* on lease routes, 404/410 mean the lease is lost, and 401 that the token matches no lease;
* ``400 invalid_transition`` lists the ``allowed`` triggers (served tracker) or not (NullTickets:
  the client reads them from the task);
* ``429`` (served tracker, a backlog at its cap) has ``Retry-After`` and ``role``/``depth``/``cap``
  in the error object; ``503`` has ``Retry-After: 1``;
* error bodies are read defensively: two of NullTickets' error bodies are invalid JSON.

Pure functions; imports the exception tree only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tracker_client.errors import (
    BacklogFull,
    Conflict,
    InvalidTransition,
    LeaseLost,
    NotFound,
    TokenRefused,
    TrackerCorrupt,
    TrackerError,
    TrackerRejected,
    TrackerUnavailable,
    Unsupported,
    ValidationFailed,
)

__all__ = [
    "ERRORS",
    "Answer",
    "WireError",
    "error_body",
    "error_for",
    "parse_error_body",
    "response_for",
]


@dataclass(frozen=True)
class Answer:
    """An error answer as the client read it (what a row's ``read`` builds its exception from)."""

    status: int
    #: ``error.code``, None when the body had none (an empty or foreign body).
    code: str | None
    #: The tracker's message, or a text excerpt of a foreign body.
    message: str
    #: The whole ``error`` object (``allowed``, ``role``, ...); ``{}`` when unreadable.
    error: Mapping[str, Any]
    headers: Mapping[str, str]
    #: The request, e.g. ``"POST /tasks"``.
    what: str

    @property
    def text(self) -> str:
        """The tracker's own message, unchanged, when it gave a code (the worker sees the same
        text from the served tracker as from the embedded one); else what failed, and how."""
        return (
            self.message if self.code is not None else f"{self.what}: {self.status}: {self.message}"
        )


#: What a server answers: (status, JSON body, headers).
Response = tuple[int, dict[str, Any], dict[str, str]]


@dataclass(frozen=True)
class WireError:
    """One row: an exception class and the status it travels as."""

    status: int
    error: type[TrackerError]
    #: Server side: the row answers only these ``exc.code`` values (empty: any).
    exc_codes: frozenset[str] = frozenset()
    #: Client side: the row reads only this ``error.code`` (None: any).
    wire_code: str | None = None
    #: Client side: only on lease routes (True), only elsewhere (False), or both (None).
    lease_route: bool | None = None
    #: Further statuses the client reads with this row (403 beside 401).
    also: tuple[int, ...] = ()
    #: Server side: the classes this row answers (subclasses included); ``()``: none
    #: (a read-only row). Defaults to ``(error,)``.
    serves: tuple[type[TrackerError], ...] | None = None
    #: Client side: build the exception (None: ``error(answer.text, code=answer.code)``;
    #: ``False`` in :attr:`reads`: a serve-only row).
    read: Callable[[Answer], TrackerError] | None = None
    reads: bool = True
    #: Server side: the error code, message, extra error fields and headers of the answer.
    body: Callable[[Any], tuple[str, str, dict[str, Any], dict[str, str]]] | None = None

    def answers(self, exc: TrackerError) -> bool:
        """True when the server answers ``exc`` with this row."""
        classes = (self.error,) if self.serves is None else self.serves
        return isinstance(exc, classes) and (not self.exc_codes or exc.code in self.exc_codes)

    def matches(self, answer: Answer, lease_route: bool) -> bool:
        """True when the client reads ``answer`` with this row."""
        return (
            self.reads
            and answer.status in (self.status, *self.also)
            and (self.wire_code is None or answer.code == self.wire_code)
            and (self.lease_route is None or self.lease_route == lease_route)
        )


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return float(headers.get("retry-after", ""))
    except ValueError:
        return None


def _backlog_full(exc: BacklogFull) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    retry_after = max(1, math.ceil(exc.retry_after_s or 5))
    extra = {"role": exc.role, "depth": exc.depth, "cap": exc.cap}
    return exc.code, exc.message, extra, {"Retry-After": str(retry_after)}


def _read_backlog_full(a: Answer) -> TrackerError:
    return BacklogFull(
        a.text,
        role=str(a.error.get("role", "")),
        depth=_int_or(a.error.get("depth"), -1),
        cap=_int_or(a.error.get("cap"), -1),
        code=a.code,
        retry_after_s=_retry_after(a.headers),
    )


def _read_invalid_transition(a: Answer) -> TrackerError:
    allowed = a.error.get("allowed")
    names = [t for t in allowed if isinstance(t, str)] if isinstance(allowed, list) else []
    return InvalidTransition(a.text, code=a.code, allowed=names)


def _read_token_refused(a: Answer) -> TrackerError:
    return TokenRefused(
        f"{a.what}: {a.status} {a.text} (the tracker refused the api token: check "
        "tracker.api_token)",
        code=a.code or "unauthorized",
        status=a.status,
        detail=f"{a.what}: {a.message}",
    )


def _read_unavailable(a: Answer) -> TrackerError:
    return TrackerUnavailable(
        f"{a.what}: {a.status} {a.code or 'error'}: {a.message}", code=a.code or "server_error"
    )


def _plain(exc: TrackerError) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    return exc.code, exc.message, {}, {}


#: Row order is the order of precedence on both sides (the first row that fits wins).
ERRORS: tuple[WireError, ...] = (
    # Lease routes: the lease is gone (404/410) or the token matches none (401, "Invalid token").
    WireError(
        401,
        LeaseLost,
        exc_codes=frozenset({"invalid_token"}),
        lease_route=True,
        read=lambda a: LeaseLost(a.text, code="invalid_token"),
        body=lambda exc: ("unauthorized", "Invalid token", {}, {}),
    ),
    WireError(
        410,
        LeaseLost,
        exc_codes=frozenset({"expired", "revoked"}),
        lease_route=True,
        read=lambda a: LeaseLost(a.text, code=a.code or "expired"),
    ),
    # ... but not an unknown task a transition's wait_for names (extension fan_in).
    WireError(404, NotFound, wire_code="wait_for_not_found", lease_route=True, serves=()),
    WireError(
        404,
        LeaseLost,
        lease_route=True,
        read=lambda a: LeaseLost(a.text, code=a.code or "not_found"),
        body=lambda exc: (exc.code or "not_found", exc.message, {}, {}),
    ),
    WireError(409, Conflict),
    WireError(
        400,
        InvalidTransition,
        wire_code="invalid_transition",
        read=_read_invalid_transition,
        body=lambda exc: ("invalid_transition", exc.message, {"allowed": exc.allowed}, {}),
    ),
    # Any other refusal is a 400 with the tracker's code; the client reads it as bad input.
    WireError(400, ValidationFailed, serves=(TrackerRejected,)),
    WireError(404, NotFound),
    WireError(429, BacklogFull, read=_read_backlog_full, body=_backlog_full),
    # NullTickets' answer to a missing or wrong admin token (our server's is the same 401).
    WireError(401, TokenRefused, also=(403,), serves=(), read=_read_token_refused),
    # NullTickets drops a request over 64 KiB; the served tracker answers 413 over its limit.
    WireError(
        413,
        ValidationFailed,
        serves=(),
        read=lambda a: ValidationFailed(a.text, code=a.code or "request_too_large"),
    ),
    WireError(501, Unsupported),
    WireError(
        503,
        TrackerUnavailable,
        read=_read_unavailable,
        body=lambda exc: (exc.code, exc.message, {}, {"Retry-After": "1"}),
    ),
    # Storage that cannot be used is the server's own failure: a plain 500 (logged by it).
    WireError(
        500,
        TrackerCorrupt,
        reads=False,
        body=lambda exc: ("internal_error", exc.message, {}, {}),
    ),
)


def response_for(exc: TrackerError) -> Response:
    """The answer a NullTickets server gives for ``exc``: (status, error body, headers).

    An exception no row answers is ``500 internal_error`` with its message.
    """
    for row in ERRORS:
        if row.answers(exc):
            code, message, extra, headers = (row.body or _plain)(exc)
            return row.status, error_body(code, message, **extra), headers
    return 500, error_body("internal_error", exc.message), {}


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """``{"error":{"code","message",...}}``: every error answer's shape."""
    return {"error": {"code": code, "message": message, **extra}}


def error_for(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    what: str,
    *,
    lease_route: bool = False,
) -> TrackerError:
    """The exception for an error answer: status first, then ``error.code``.

    ``what`` names the request (``"POST /tasks"``); ``lease_route`` marks the routes
    authenticated by the lease token, where 404/410 (and 401: the token no longer matches a
    lease) mean the lease is lost. ``headers`` is looked up in lower case (``retry-after``).
    Any other 5xx is ``TrackerUnavailable`` (retryable); any other status ``TrackerRejected``
    with the tracker's code (or ``http_<status>``).
    """
    code, message, err = parse_error_body(body)
    answer = Answer(status, code, message, err, headers, what)
    for row in ERRORS:
        if row.matches(answer, lease_route):
            return row.read(answer) if row.read else row.error(answer.text, code=code)
    if status >= 500:
        return _read_unavailable(answer)
    return TrackerRejected(answer.text, code=code or f"http_{status}")


_CODE_RE = re.compile(rb'"code"\s*:\s*"([A-Za-z0-9_]+)"')
_MESSAGE_RE = re.compile(rb'"message"\s*:\s*"(.*)"\s*}\s*}\s*$', re.DOTALL)


def parse_error_body(body: bytes) -> tuple[str | None, str, dict[str, Any]]:
    """Read ``{"error":{"code","message",...}}`` from an error answer, whatever shape it has.

    Returns (code, message, the whole ``error`` object). Two of the real server's error bodies
    are invalid JSON (an unescaped quote in the message): the code and message are then taken
    with a tolerant pattern. An empty or foreign body gives ``(None, <text excerpt>, {})``.
    """
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested ~1,000 deep (hostile)
        code_match = _CODE_RE.search(body)
        msg_match = _MESSAGE_RE.search(body)
        code = code_match.group(1).decode() if code_match else None
        if msg_match:
            message = msg_match.group(1).decode("utf-8", "replace")
        else:
            message = body[:200].decode("utf-8", "replace").strip() or "(empty body)"
        return code, message, {}
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        message = err.get("message") if isinstance(err.get("message"), str) else ""
        return code, message or (code or "(no message)"), err
    return None, body[:200].decode("utf-8", "replace").strip() or "(empty body)", {}
