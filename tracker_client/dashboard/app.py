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
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from tracker_client.dashboard import auth
from tracker_client.dashboard.state import BadParam, Dashboard, DashboardSettings, here
from tracker_client.errors import NotFound, TrackerError, TrackerUnavailable
from tracker_client.protocol import Tracker

__all__ = [
    "BadParam",  # re-exported from .state
    "Dashboard",
    "DashboardSettings",
    "create_dashboard",
    "guarded",
]

log = logging.getLogger("backlog_worker.dashboard")


#: A page handler: the request, the dashboard and who is looking.
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
        target = quote(here(request), safe="")
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
    from tracker_client.dashboard import actions, bulk, charts, live, pictures, steps, views

    routes = [
        Route("/", guarded(views.queue_page), methods=["GET"], name="queue"),
        Route("/tasks", guarded(views.tasks_page), methods=["GET"], name="tasks"),
        Route("/tasks/{task_id}", guarded(views.task_page), methods=["GET"], name="task"),
        Route("/tasks/{task_id}/stream", guarded(live.stream), methods=["GET"], name="stream"),
        Route("/static/console.js", live.script, methods=["GET"], name="script"),
        Route("/workers", guarded(views.workers_page), methods=["GET"], name="workers"),
        Route("/schedules", guarded(views.schedules_page), methods=["GET"], name="schedules"),
        Route("/inbox", guarded(steps.inbox_page), methods=["GET"], name="inbox"),
        Route("/charts", guarded(charts.charts_page), methods=["GET"], name="charts"),
        Route("/bulk", guarded(bulk.bulk_page), methods=["GET"], name="bulk"),
        Route("/bulk/{action:str}", guarded(bulk.bulk_action), methods=["POST"], name="bulk_do"),
        Route("/pipelines", guarded(pictures.pipelines_page), methods=["GET"], name="pipelines"),
        Route("/tasks/{task_id}/step", guarded(steps.step_action), methods=["POST"], name="step"),
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
