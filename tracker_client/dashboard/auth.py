"""Who may see the dashboard and who may press its buttons: the admin token, sessions, CSRF.

On a rail with an admin token every page but the login form needs it, given either as
``Authorization: Bearer <token>`` (scripts) or once in the login form (``POST``, the token in
the body), which opens a session: a random id in an ``HttpOnly``, ``SameSite=Strict`` cookie
scoped to the dashboard's path. The cookie never holds the token, and the token is never put
in a page, a URL or a log line. Each session has its own CSRF token, which every button's form
carries back.

Without an admin token the dashboard is read-only (no buttons, every ``POST`` refused) unless
the operator opts in (``allow_actions``): a rail left open to its host is then still not
writable from any page a browser visits.

It may touch the request's headers, cookies and form body, and its own in-memory session table;
no tracker, no disk.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from tracker_client.serve.throttle import AuthThrottle

__all__ = [
    "COOKIE",
    "MAX_FORM_BYTES",
    "STALE",
    "BadForm",
    "LoginThrottle",
    "Session",
    "Sessions",
    "Viewer",
    "read_form",
]

#: The session cookie's name.
COOKIE = "bw_dashboard"

#: What a refused form says when its CSRF token is missing or not the session's.
STALE = "csrf: the form's token is missing or stale; reload the page and press the button again."

#: The largest form body read (a login or a button: a few fields).
MAX_FORM_BYTES = 8192


class BadForm(Exception):
    """A form body the dashboard will not read: its status and the words to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Session:
    """One browser's session: its random id (the cookie), CSRF token, expiry and the result of
    its last action (shown once on the next page)."""

    id: str
    csrf: str
    expires_at: float
    flash: str | None = None
    flash_ok: bool = True
    #: False for a session opened with a read token: pages without buttons.
    can_act: bool = True


class Sessions:
    """The open sessions, in memory (a restart logs everyone out), at most ``limit`` of them
    (the oldest is dropped first), each valid for ``ttl_s`` from its login."""

    def __init__(self, *, limit: int = 1000, ttl_s: float = 12 * 3600) -> None:
        self._items: OrderedDict[str, Session] = OrderedDict()
        self.limit = limit
        self.ttl_s = ttl_s

    def open(self, *, can_act: bool = True) -> Session:
        """A new session with fresh random id and CSRF token (``can_act``: it may press the
        buttons; a read token's session may not)."""
        while len(self._items) >= self.limit:
            self._items.popitem(last=False)
        session = Session(
            secrets.token_urlsafe(32),
            secrets.token_urlsafe(32),
            time.monotonic() + self.ttl_s,
            can_act=can_act,
        )
        self._items[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of that id, or None (unknown or expired: an expired one is dropped)."""
        if not session_id:
            return None
        session = self._items.get(session_id)
        if session is not None and session.expires_at <= time.monotonic():
            del self._items[session_id]
            return None
        return session

    def close(self, session_id: str) -> None:
        """End a session (logout)."""
        self._items.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._items)


#: Failed logins per client address (the dashboard's login form; :mod:`~tracker_client.serve.\
#: throttle`).
LoginThrottle = AuthThrottle


@dataclass
class Viewer:
    """What the current request may do: see the pages, act (show and press buttons), and how
    it proved it (``via_header``: a Bearer header, which no other site can make a browser
    send, so its posts need no CSRF token)."""

    can_act: bool
    session: Session | None = None
    via_header: bool = False
    #: A session opened by this request (its cookie is set on the response).
    new_session: bool = False
    logged_in: bool = False
    csrf: str = field(default="", repr=False)

    def check_csrf(self, sent: str | None) -> bool:
        """True when a posted form may act: a Bearer request, or the session's own CSRF token."""
        if self.via_header:
            return True
        if self.session is None or not sent:
            return False
        return hmac.compare_digest(sent.encode(), self.session.csrf.encode())


def token_matches(given: str | None, token: bytes) -> bool:
    """Constant-time comparison of a presented token with the admin token."""
    return given is not None and hmac.compare_digest(given.encode(), token)


def bearer(request: Request) -> str | None:
    """The value of an ``Authorization: Bearer`` header, or None."""
    value = request.headers.get("authorization", "")
    scheme, _, rest = value.partition(" ")
    return rest.strip() if scheme.lower() == "bearer" and rest.strip() else None


def set_cookie(response: Response, request: Request, session: Session, root: str) -> None:
    """Put ``session``'s id in the dashboard's cookie (HttpOnly, SameSite=Strict, its path)."""
    response.set_cookie(
        COOKIE,
        session.id,
        httponly=True,
        samesite="strict",
        path=root or "/",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response, root: str) -> None:
    """Remove the dashboard's cookie (logout)."""
    response.delete_cookie(COOKIE, path=root or "/", httponly=True, samesite="strict")


async def read_form(request: Request) -> dict[str, str]:
    """A ``application/x-www-form-urlencoded`` body (or none at all) as one value per field.

    ``BadForm`` (415) for another content type, (413) past :data:`MAX_FORM_BYTES`, (400) for
    a body that is not UTF-8 or repeats a field.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("application/x-www-form-urlencoded", ""):
        raise BadForm(415, "the form must be sent as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BadForm(413, f"the form is larger than {MAX_FORM_BYTES} bytes")
    if body and not kind:
        raise BadForm(415, "the form must be sent as application/x-www-form-urlencoded")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadForm(400, f"the form could not be read: {exc}") from None
    repeated = sorted(name for name, values in fields.items() if len(values) > 1)
    if repeated:
        raise BadForm(400, f"{repeated[0]}: given more than once")
    return {name: values[0] for name, values in fields.items()}
