"""The dashboard's state: its settings, the tracker it shows, its sessions, how pages render.

Kept apart from :mod:`~tracker_client.dashboard.app` (the routes) so the pages
(:mod:`~tracker_client.dashboard.views`, :mod:`~tracker_client.dashboard.actions`) can use it
without importing the app that routes to them.

It may touch the admin token it is given and its session table; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tracker_client.dashboard import auth, render
from tracker_client.protocol import Tracker

if TYPE_CHECKING:
    from tracker_client.serve.helpers import Closing

__all__ = ["BadParam", "Dashboard", "DashboardSettings", "here"]


@dataclass(frozen=True)
class DashboardSettings:
    """How the dashboard runs: the admin token (None: an open rail), whether an open rail's
    dashboard may still act (cancel, requeue), and how often list pages reload themselves."""

    admin_token: str | None = field(default=None, repr=False)
    #: Whether a presented value is a read-only token (the served rail's scoped tokens): it
    #: sees every page, without buttons. None: only the admin token logs in.
    is_reader: Callable[[str], bool] | None = field(default=None, repr=False)
    #: Without an admin token, show the buttons anyway (the operator opted in).
    allow_actions: bool = False
    #: Seconds between a list page's reloads (its ``<meta http-equiv="refresh">``).
    refresh_s: int = 5
    #: Most sessions kept at once (the oldest is dropped first).
    max_sessions: int = 1000
    #: Set when the server stops: a task's live stream ends at once instead of holding the
    #: stop up (None: streams end on their own, within ``live.STREAM_S``).
    closing: Closing | None = field(default=None, repr=False)


class BadParam(Exception):
    """A query or form parameter the dashboard refuses: its name and why (a ``400`` page)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name}: {why}")
        self.name = name


class Dashboard:
    """One dashboard: the tracker it shows, its settings and its sessions."""

    def __init__(self, tracker: Tracker, settings: DashboardSettings) -> None:
        self.tracker = tracker
        self.settings = settings
        self.sessions = auth.Sessions(limit=settings.max_sessions)
        self.throttle = auth.LoginThrottle(what="dashboard login")
        self._token = settings.admin_token.encode() if settings.admin_token else None

    @property
    def protected(self) -> bool:
        """True when the rail has an admin token (every page but the login form needs it)."""
        return self._token is not None

    def token_matches(self, given: str | None) -> bool:
        """Whether ``given`` is the admin token (constant time)."""
        return self._token is not None and auth.token_matches(given, self._token)

    def reader_matches(self, given: str | None) -> bool:
        """Whether ``given`` is a read-only token (it sees the pages, presses no button)."""
        check = self.settings.is_reader
        return given is not None and check is not None and check(given)

    def authorize(self, request: Request) -> auth.Viewer | None:
        """Who the request is, or None when it must log in first (a protected rail)."""
        session = self.sessions.get(request.cookies.get(auth.COOKIE))
        if self._token is not None:
            given = auth.bearer(request)
            if given is not None:
                if self.token_matches(given):
                    return auth.Viewer(can_act=True, via_header=True)
                if self.reader_matches(given):
                    return auth.Viewer(can_act=False, via_header=True)
                return None
            if session is None:
                return None
            return auth.Viewer(
                can_act=session.can_act, session=session, logged_in=True, csrf=session.csrf
            )
        if not self.settings.allow_actions:
            return auth.Viewer(can_act=False)
        new = session is None
        session = session or self.sessions.open()
        return auth.Viewer(can_act=True, session=session, new_session=new, csrf=session.csrf)

    def render(
        self,
        request: Request,
        viewer: auth.Viewer | None,
        template: str,
        context: Mapping[str, Any],
        *,
        status: int = 200,
        refresh: bool = False,
        live: bool = False,
        section: str = "",
    ) -> Response:
        """A page: ``template`` with the common context (links, viewer, refresh, flash);
        ``refresh``: a list page, reloading itself unless ``?refresh=off``; ``live``: its
        script streams what is new, so it reloads itself only with scripts off."""
        root = request.scope.get("root_path", "")
        off = request.query_params.get("refresh") == "off"
        toggle = request.url.include_query_params(refresh="on" if off else "off")
        flash = None
        if viewer is not None and viewer.session is not None and viewer.session.flash:
            flash = (viewer.session.flash, viewer.session.flash_ok)
            viewer.session.flash = None
        response = render.page(
            template,
            {
                "root": root,
                "viewer": viewer,
                "protected": self.protected,
                "refresh_s": self.settings.refresh_s if refresh and not off else None,
                "refresh_off": off,
                "refreshable": refresh,
                "live": live,
                "keep": "?refresh=off" if off else "",
                "here": here(request),
                "toggle": toggle.path + "?" + toggle.query,
                "section": section,
                "flash": flash,
                **context,
            },
            status=status,
        )
        if viewer is not None and viewer.new_session and viewer.session is not None:
            auth.set_cookie(response, request, viewer.session, root)
        return response

    def error(
        self, request: Request, viewer: auth.Viewer | None, status: int, title: str, message: str
    ) -> Response:
        """An error page (its status, a title, the words saying what is wrong)."""
        return self.render(
            request, viewer, "error.html", {"title": title, "message": message}, status=status
        )


def here(request: Request) -> str:
    """The request's own path and query (a button's form comes back to it)."""
    query = f"?{request.url.query}" if request.url.query else ""
    return request.url.path + query
