"""The dashboard's writes: logging in and out, and a task's cancel and requeue buttons.

Every write is a ``POST`` form. Login takes the admin token in the body and answers a session
cookie; a button needs a viewer who may act (:class:`~tracker_client.dashboard.auth.Viewer`)
and the session's CSRF token, then calls the tracker and redirects back to the task's page
(``303``), which shows what happened once. A failed login is logged without what was typed.

It may touch the tracker (``cancel``, ``requeue``), the session table and the request's form.
"""

from __future__ import annotations

import logging
import math

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tracker_client.dashboard import auth
from tracker_client.dashboard.state import BadParam, Dashboard
from tracker_client.errors import Conflict, TrackerRejected, Unsupported

__all__ = ["login", "login_form", "logout", "task_action"]

log = logging.getLogger("backlog_worker.dashboard")

#: The longest cancel reason or requeue stage accepted from a form.
MAX_FIELD = 500


def _dash(request: Request) -> Dashboard:
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard


def _safe_next(root: str, value: str | None) -> str:
    """Where to go after login: a path of the dashboard itself, else its first page."""
    if value and value.startswith(f"{root}/") and not value.startswith("//") and "\\" not in value:
        return value
    return f"{root}/"


async def login_form(request: Request) -> Response:
    """The login form (the one page an unauthenticated browser may see)."""
    dash = _dash(request)
    root = request.scope.get("root_path", "")
    if not dash.protected:
        return RedirectResponse(f"{root}/", status_code=303)
    nxt = _safe_next(root, request.query_params.get("next"))
    return dash.render(request, None, "login.html", {"next": nxt, "failed": False})


async def login(request: Request) -> Response:
    """Check the token of the form; on success open a session and go where the form said."""
    dash = _dash(request)
    root = request.scope.get("root_path", "")
    if not dash.protected:
        return RedirectResponse(f"{root}/", status_code=303)
    try:
        form = await auth.read_form(request)
    except auth.BadForm as exc:
        return dash.error(request, None, exc.status, "Bad request", str(exc))
    nxt = _safe_next(root, form.get("next"))
    client = request.client.host if request.client else "?"
    wait_s = dash.throttle.wait_s(client)
    if wait_s:
        response = dash.error(
            request, None, 429, "Too many failed logins", f"Try again in {math.ceil(wait_s)} s."
        )
        response.headers["Retry-After"] = str(math.ceil(wait_s))
        return response
    given = form.get("token") or None
    admin = dash.token_matches(given)
    if not admin and not dash.reader_matches(given):
        dash.throttle.failed(client)  # logged there (the address, never what was typed)
        context = {"next": nxt, "failed": True}
        return dash.render(request, None, "login.html", context, status=401)
    session = dash.sessions.open(can_act=admin)
    response = RedirectResponse(nxt, status_code=303)
    auth.set_cookie(response, request, session, root)
    return response


async def logout(request: Request, dash: Dashboard, viewer: auth.Viewer) -> Response:
    """End the session (its CSRF token must come along) and go to the login form."""
    form = await auth.read_form(request)
    if not viewer.check_csrf(form.get("csrf")):
        return dash.error(request, viewer, 403, "Forbidden", auth.STALE)
    root = request.scope.get("root_path", "")
    if viewer.session is not None:
        dash.sessions.close(viewer.session.id)
    response = RedirectResponse(f"{root}/login" if dash.protected else f"{root}/", 303)
    auth.clear_cookie(response, root)
    return response


async def task_action(request: Request, dash: Dashboard, viewer: auth.Viewer) -> Response:
    """``cancel`` or ``requeue`` the task, then back to its page with the result."""
    task_id = request.path_params["task_id"]
    action = request.path_params["action"]
    if action not in ("cancel", "requeue"):
        return dash.error(request, viewer, 404, "Not found", "There is no such page.")
    if not viewer.can_act:
        return dash.error(
            request,
            viewer,
            403,
            "Read-only dashboard",
            "This dashboard is read-only: the rail has no admin token and actions were not "
            "allowed (backlog-worker dashboard --allow-actions).",
        )
    form = await auth.read_form(request)
    if not viewer.check_csrf(form.get("csrf")):
        return dash.error(request, viewer, 403, "Forbidden", auth.STALE)
    for name in ("reason", "stage"):
        if len(form.get(name, "")) > MAX_FIELD:
            raise BadParam(name, f"longer than {MAX_FIELD} characters")
    await dash.tracker.get_task(task_id)  # NotFound: the 404 page, nothing written
    ok, message = await _apply(dash, task_id, action, form)
    log.info("dashboard: %s %s: %s", action, task_id, message)
    if viewer.session is not None:
        viewer.session.flash, viewer.session.flash_ok = message, ok
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/tasks/{task_id}", status_code=303)


_DONE = {"cancel": "cancelled", "requeue": "requeued"}


async def _apply(
    dash: Dashboard, task_id: str, action: str, form: dict[str, str]
) -> tuple[bool, str]:
    """Call the tracker; (succeeded, the words for the page)."""
    try:
        if action == "cancel":
            reason = form.get("reason", "").strip() or "cancelled"
            cancelled = await dash.tracker.cancel(task_id, reason=reason)
            revoked = ", its lease revoked" if cancelled.revoked_lease else ""
            return True, f"Cancelled {task_id} in stage {cancelled.stage}{revoked}."
        stage = form.get("stage", "").strip() or None
        requeued = await dash.tracker.requeue(task_id, stage=stage)
        return True, f"Requeued {task_id} to stage {requeued.stage}."
    except Conflict as exc:
        return False, f"Not {_DONE[action]}: {exc}"
    except Unsupported as exc:
        return False, f"This rail cannot {action}: {exc}"
    except TrackerRejected as exc:
        return False, f"Refused: {exc}"
