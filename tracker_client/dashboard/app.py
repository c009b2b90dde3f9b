"""The dashboard's Starlette application: its routes, who may see them, and its error pages.

:func:`create_dashboard` builds the app for one tracker; ``tracker serve`` mounts it at ``/ui``
and ``backlog-worker dashboard`` serves it there on its own. Every handler is wrapped by
:func:`guarded`, which authorises the request (:mod:`~tracker_client.dashboard.auth`), turns a
bad query parameter into a ``400`` page naming it, an unknown task into ``404`` and a rail that
is down into ``503``. Links are built from the mount point (``root_path``), so the same app
works under any prefix.

It may touch the tracker (through the pages of :mod:`~tracker_client.dashboard.views` and
:mod:`~tracker_client.dashboard.actions`), the admin token it is given and its session table.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from tracker_client.dashboard import auth, render
from tracker_client.errors import NotFound, TrackerError, TrackerUnavailable
from tracker_client.protocol import Tracker

__all__ = ["BadParam", "Dashboard", "DashboardSettings", "create_dashboard", "guarded"]

log = logging.getLogger("backlog_worker.dashboard")


@dataclass(frozen=True)
class DashboardSettings:
    """How the dashboard runs: the admin token (None: an open rail), whether an open rail's
    dashboard may still act (cancel, requeue), and how often list pages reload themselves."""

    admin_token: str | None = field(default=None, repr=False)
    #: Without an admin token, show the buttons anyway (the operator opted in).
    allow_actions: bool = False
    #: Seconds between a list page's reloads (its ``<meta http-equiv="refresh">``).
    refresh_s: int = 5
    #: Most sessions kept at once (the oldest is dropped first).
    max_sessions: int = 1000


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
        self.throttle = auth.LoginThrottle()
        self._token = settings.admin_token.encode() if settings.admin_token else None

    @property
    def protected(self) -> bool:
        """True when the rail has an admin token (every page but the login form needs it)."""
        return self._token is not None

    def token_matches(self, given: str | None) -> bool:
        """Whether ``given`` is the admin token (constant time)."""
        return self._token is not None and auth.token_matches(given, self._token)

    def authorize(self, request: Request) -> auth.Viewer | None:
        """Who the request is, or None when it must log in first (a protected rail)."""
        session = self.sessions.get(request.cookies.get(auth.COOKIE))
        if self._token is not None:
            given = auth.bearer(request)
            if given is not None:
                return (
                    auth.Viewer(can_act=True, via_header=True)
                    if self.token_matches(given)
                    else None
                )
            if session is None:
                return None
            return auth.Viewer(can_act=True, session=session, logged_in=True, csrf=session.csrf)
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
        section: str = "",
    ) -> Response:
        """A page: ``template`` with the common context (links, viewer, refresh, flash);
        ``refresh``: a list page, reloading itself unless ``?refresh=off``."""
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
                "keep": "?refresh=off" if off else "",
                "here": _here(request),
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


def _here(request: Request) -> str:
    """The request's own path and query (a button's form comes back to it)."""
    query = f"?{request.url.query}" if request.url.query else ""
    return request.url.path + query


Handler = Callable[[Request, Dashboard, auth.Viewer], Awaitable[Response]]


def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind the dashboard's auth and error pages.

    A request that must log in first gets a redirect to the login form (``GET``) or ``401``;
    ``BadParam`` is ``400``, ``NotFound`` ``404``, a rail that is down ``503``.
    """

    async def endpoint(request: Request) -> Response:
        dash: Dashboard = request.app.state.dashboard
        viewer = dash.authorize(request)
        if viewer is None:
            return _login_required(request, dash)
        try:
            return await handler(request, dash, viewer)
        except BadParam as exc:
            return dash.error(request, viewer, 400, "Bad request", str(exc))
        except auth.BadForm as exc:
            return dash.error(request, viewer, exc.status, "Bad request", str(exc))
        except NotFound as exc:
            return dash.error(request, viewer, 404, "Not found", str(exc))
        except TrackerUnavailable as exc:
            return dash.error(request, viewer, 503, "The rail is unavailable", str(exc))
        except TrackerError as exc:
            log.warning("dashboard: %s: %s", request.url.path, exc)
            return dash.error(request, viewer, 502, "The rail refused", str(exc))

    return endpoint


def _login_required(request: Request, dash: Dashboard) -> Response:
    root = request.scope.get("root_path", "")
    if request.method == "GET" and auth.bearer(request) is None:
        target = quote(_here(request), safe="")
        return RedirectResponse(f"{root}/login?next={target}", status_code=303)
    return dash.error(
        request,
        None,
        401,
        "Login required",
        "This rail has an admin token: log in, or send Authorization: Bearer <token>.",
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    dash: Dashboard = request.app.state.dashboard
    viewer = dash.authorize(request)
    if viewer is None and dash.protected:
        return _login_required(request, dash)
    if isinstance(exc, HTTPException) and exc.status_code == 405:
        return dash.error(request, viewer, 405, "Method not allowed", "Not for this page.")
    return dash.error(request, viewer, 404, "Not found", "There is no such page.")


def create_dashboard(tracker: Tracker, settings: DashboardSettings | None = None) -> Starlette:
    """The dashboard of ``tracker`` as an ASGI app (mount it, e.g. at ``/ui``). The caller owns
    the tracker (opens and closes it)."""
    from tracker_client.dashboard import actions, views

    routes = [
        Route("/", guarded(views.queue_page), methods=["GET"], name="queue"),
        Route("/tasks", guarded(views.tasks_page), methods=["GET"], name="tasks"),
        Route("/tasks/{task_id}", guarded(views.task_page), methods=["GET"], name="task"),
        Route("/workers", guarded(views.workers_page), methods=["GET"], name="workers"),
        Route("/schedules", guarded(views.schedules_page), methods=["GET"], name="schedules"),
        Route("/login", actions.login_form, methods=["GET"], name="login_form"),
        Route("/login", actions.login, methods=["POST"], name="login"),
        Route("/logout", guarded(actions.logout), methods=["POST"], name="logout"),
        Route(
            "/tasks/{task_id}/{action:str}",
            guarded(actions.task_action),
            methods=["POST"],
            name="task_action",
        ),
    ]
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found})
    app.state.dashboard = Dashboard(tracker, settings or DashboardSettings())
    return app
