"""Bulk actions with a preview: cancel every open task of a pipeline and/or role, requeue a
pipeline's dead letters.

``GET /bulk`` previews without writing: for a requeue the rail's own count (``requeue_all``
with ``dry_run``, split by dead-letter reason); for a cancel, which has no dry run in the rail
(``cancel_all``), the open tasks found among at most :data:`PREVIEW_SCAN` listed tasks (the
page says when that bound was reached, so the count is a floor). Each preview lists its first
:data:`PREVIEW_ROWS` tasks. The confirm button posts the same choice with the session's CSRF
token to ``/bulk/cancel`` or ``/bulk/requeue``, which calls the rail and comes back with what it
did.

It may touch the tracker (``list_tasks``, ``cancel_all``, ``requeue_all``) and the form.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tracker_client import calls
from tracker_client.dashboard import auth
from tracker_client.dashboard.data import Catalog
from tracker_client.dashboard.state import BadParam, Dashboard
from tracker_client.errors import TrackerRejected, Unsupported
from tracker_client.models import Pipeline, Task
from tracker_client.ops_models import RequeueAllResult

__all__ = ["PREVIEW_ROWS", "PREVIEW_SCAN", "bulk_action", "bulk_page"]

log = logging.getLogger("backlog_worker.dashboard")

#: Most tasks listed to preview a cancel (it has no dry run), and tasks shown per preview.
PREVIEW_SCAN = 2000
PREVIEW_ROWS = 50

#: Longest text accepted (a pipeline, a role, a reason).
MAX_TEXT = 200

ACTIONS = ("cancel", "requeue")


@dataclass(frozen=True)
class Choice:
    """What to act on: the action, its pipeline (by name) and role, and (requeue) the reason."""

    action: str
    pipeline: Pipeline | None
    role: str | None
    reason: str | None

    def query(self) -> str:
        """The choice as the preview page's query string."""
        fields = {
            "action": self.action,
            "pipeline": self.pipeline.name if self.pipeline else "",
            "role": self.role or "",
            "reason": self.reason or "",
        }
        return urlencode({k: v for k, v in fields.items() if v})


@dataclass
class Preview:
    """What the choice would touch: a count (exact, or a floor when ``cut``), by reason for a
    requeue, and the first tasks."""

    count: int
    cut: bool = False
    scanned: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    rows: list[Task] = field(default_factory=list)


def _text(values: dict[str, str], name: str) -> str | None:
    value = (values.get(name) or "").strip()
    if len(value) > MAX_TEXT:
        raise BadParam(name, f"longer than {MAX_TEXT} characters")
    return value or None


def _choice(values: dict[str, str], catalog: Catalog, action: str) -> Choice:
    """The checked choice (``BadParam`` naming what is wrong)."""
    ref = _text(values, "pipeline")
    pipeline = catalog.find(ref) if ref else None
    if ref and pipeline is None:
        known = ", ".join(sorted(p.name for p in catalog.pipelines.values())) or "none"
        raise BadParam("pipeline", f"unknown pipeline {ref!r} (known: {known})")
    role = _text(values, "role")
    roles = catalog.roles()
    if role is not None and role not in roles:
        raise BadParam("role", f"unknown role {role!r} (known: {', '.join(roles) or 'none'})")
    reason = _text(values, "reason")
    if action == "requeue":
        if pipeline is None:
            raise BadParam("pipeline", "a requeue needs the pipeline whose dead letters to requeue")
        if role is not None:
            raise BadParam("role", "a requeue takes a pipeline (and a reason), not a role")
    elif pipeline is None and role is None:
        raise BadParam("pipeline", "a cancel needs a pipeline, a role or both")
    elif reason is not None:
        raise BadParam("reason", "a cancel takes a pipeline and/or a role, not a reason")
    return Choice(action, pipeline, role, reason)


async def _preview(dash: Dashboard, catalog: Catalog, choice: Choice) -> Preview:
    """Count what ``choice`` would touch, without writing."""
    preview = Preview(0)
    if choice.action == "requeue":
        assert choice.pipeline is not None  # checked in _choice
        dry: RequeueAllResult = await calls.REQUEUE_ALL.call(
            dash.tracker, pipeline_id=choice.pipeline.id, reason=choice.reason, dry_run=True
        )
        preview.count, preview.by_reason = dry.requeued, dict(dry.by_reason)
    cursor: str | None = None
    while preview.scanned < PREVIEW_SCAN:
        page = await dash.tracker.list_tasks(
            pipeline_id=choice.pipeline.id if choice.pipeline else None, limit=200, cursor=cursor
        )
        preview.scanned += len(page.items)
        for task in page.items:
            if _touches(task, catalog, choice):
                if choice.action == "cancel":
                    preview.count += 1
                if len(preview.rows) < PREVIEW_ROWS:
                    preview.rows.append(task)
        cursor = page.next_cursor
        if cursor is None:
            return preview
    preview.cut = choice.action == "cancel"
    return preview


def _touches(task: Task, catalog: Catalog, choice: Choice) -> bool:
    stage = catalog.stage(task.pipeline_id, task.stage)
    if choice.action == "requeue":
        dead = task.dead_letter_reason is not None
        return dead and (choice.reason is None or task.dead_letter_reason == choice.reason)
    if task.dead_letter_reason is not None or stage.get("terminal"):
        return False
    return choice.role is None or stage.get("agent_role") == choice.role


async def bulk_page(request: Request, dash: Dashboard, viewer: auth.Viewer) -> Response:
    """The bulk form, and with ``action`` given, the preview of what it would do."""
    catalog = await Catalog.read(dash.tracker)
    values = dict(request.query_params)
    action = values.get("action") or None
    if action is not None and action not in ACTIONS:
        raise BadParam("action", f"{action[:40]!r} is not one of {', '.join(ACTIONS)}")
    choice = _choice(values, catalog, action) if action else None
    preview = None
    unsupported = None
    if choice is not None:
        try:
            preview = await _preview(dash, catalog, choice)
        except Unsupported as exc:
            unsupported = str(exc)
    context = {
        "choice": choice,
        "preview": preview,
        "unsupported": unsupported,
        "pipelines": sorted(p.name for p in catalog.pipelines.values()),
        "roles": catalog.roles(),
        "names": {p.id: p.name for p in catalog.pipelines.values()},
        "scan": PREVIEW_SCAN,
        "shown": PREVIEW_ROWS,
    }
    return dash.render(request, viewer, "bulk.html", context, section="bulk")


async def bulk_action(request: Request, dash: Dashboard, viewer: auth.Viewer) -> Response:
    """Do the previewed bulk action, then back to the preview with what it did."""
    action = request.path_params["action"]
    if action not in ACTIONS:
        return dash.error(request, viewer, 404, "Not found", "There is no such page.")
    if not viewer.can_act:
        return dash.error(
            request,
            viewer,
            403,
            "Read-only dashboard",
            "This session may not act: log in with the admin token for bulk actions.",
        )
    form = await auth.read_form(request)
    if not viewer.check_csrf(form.get("csrf")):
        return dash.error(request, viewer, 403, "Forbidden", auth.STALE)
    catalog = await Catalog.read(dash.tracker)
    choice = _choice(form, catalog, action)
    pid = choice.pipeline.id if choice.pipeline else None
    try:
        if action == "cancel":
            count = await dash.tracker.cancel_all(pipeline_id=pid, role=choice.role)
            ok, message = True, f"Cancelled {count} task{'' if count == 1 else 's'}."
        else:
            assert pid is not None  # checked in _choice
            done: RequeueAllResult = await calls.REQUEUE_ALL.call(
                dash.tracker, pipeline_id=pid, reason=choice.reason
            )
            plural = "" if done.requeued == 1 else "s"
            ok, message = True, f"Requeued {done.requeued} task{plural}."
    except Unsupported as exc:
        ok, message = False, f"This rail cannot {action} in bulk: {exc}"
    except TrackerRejected as exc:
        ok, message = False, f"Refused: {exc}"
    log.info("dashboard: bulk %s (%s): %s", action, choice.query(), message)
    if viewer.session is not None:
        viewer.session.flash, viewer.session.flash_ok = message, ok
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/bulk?{choice.query()}", status_code=303)
