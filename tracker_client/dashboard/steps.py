"""Human steps in the dashboard: the inbox of tasks waiting for a person, and the form that
moves one on (approve, reject, any trigger of its stage) with instructions for the next run.

A human step is a stage marked ``"human": true`` (no role, not terminal: no worker claims it;
docs/guarantees/backlog.md). The inbox lists the tasks in those stages, at most
:data:`INBOX_PER_STEP` per step (one page of the rail's ``list_tasks``; the page says so). The
form posts to ``/tasks/{id}/step`` with the session's CSRF token, the trigger pressed, the
instructions, and the stage and version the operator saw, and calls the rail's
``transition_task`` (extension ``human_steps``) with them: a task that moved meanwhile is
refused (``Conflict``), not moved twice.

It may touch the tracker (``list_tasks``, ``get_task``, ``transition_task``) and the request's
form.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tracker_client.dashboard import auth
from tracker_client.dashboard.data import Catalog
from tracker_client.dashboard.state import BadParam, Dashboard
from tracker_client.errors import Conflict, InvalidTransition, TrackerRejected, Unsupported
from tracker_client.models import Task

__all__ = ["INBOX_PER_STEP", "MAX_INSTRUCTIONS", "inbox_page", "step_action"]

log = logging.getLogger("backlog_worker.dashboard")

#: Most tasks listed per human step (one page of ``list_tasks``).
INBOX_PER_STEP = 200

#: Longest instructions accepted from the form (the form itself is at most 8 KiB).
MAX_INSTRUCTIONS = 4000

#: Longest trigger or stage name accepted from the form.
MAX_NAME = 200


@dataclass(frozen=True)
class Waiting:
    """A task waiting at a human step, with where it can go from there."""

    task: Task
    pipeline: str
    triggers: list[str]


def _triggers(catalog: Catalog, pipeline_id: str, stage: str) -> list[str]:
    pipeline = catalog.pipelines.get(pipeline_id)
    moves = (pipeline.definition.get("transitions") or []) if pipeline else []
    return [
        str(t["trigger"])
        for t in moves
        if isinstance(t, dict) and t.get("from") == stage and "trigger" in t
    ]


async def inbox_page(request: Request, dash: Dashboard, viewer: auth.Viewer) -> Response:
    """Every task waiting at a human step (at most :data:`INBOX_PER_STEP` per step)."""
    if request.query_params.get("refresh") not in (None, "", "on", "off"):
        raise BadParam("refresh", "not one of on, off")
    catalog = await Catalog.read(dash.tracker)
    rows: list[Waiting] = []
    cut: list[str] = []
    for pipeline, stage in catalog.human_steps():
        page = await dash.tracker.list_tasks(
            stage=stage, pipeline_id=pipeline.id, limit=INBOX_PER_STEP
        )
        if page.next_cursor is not None:
            cut.append(f"{pipeline.name} / {stage}")
        triggers = _triggers(catalog, pipeline.id, stage)
        rows.extend(
            Waiting(t, pipeline.name, triggers) for t in page.items if not t.dead_letter_reason
        )
    context = {
        "rows": rows,
        "steps": [(p.name, s) for p, s in catalog.human_steps()],
        "cut": cut,
        "per_step": INBOX_PER_STEP,
    }
    return dash.render(request, viewer, "inbox.html", context, refresh=True, section="inbox")


def _field(form: dict[str, str], name: str, longest: int, *, required: bool = True) -> str:
    value = form.get(name, "")
    if len(value) > longest:
        raise BadParam(name, f"longer than {longest} characters")
    if required and not value.strip():
        raise BadParam(name, "missing (the form must say it)")
    return value


async def step_action(request: Request, dash: Dashboard, viewer: auth.Viewer) -> Response:
    """Move the task on from its human step along the trigger pressed, then back to its page."""
    task_id = request.path_params["task_id"]
    if not viewer.can_act:
        return dash.error(
            request,
            viewer,
            403,
            "Read-only dashboard",
            "This session may not act: log in with the admin token to move a human step on.",
        )
    form = await auth.read_form(request)
    if not viewer.check_csrf(form.get("csrf")):
        return dash.error(request, viewer, 403, "Forbidden", auth.STALE)
    trigger = _field(form, "trigger", MAX_NAME)
    expected_stage = _field(form, "expected_stage", MAX_NAME)
    instructions = _field(form, "instructions", MAX_INSTRUCTIONS, required=False).strip()
    version_text = _field(form, "expected_task_version", 20, required=False)
    if version_text and not version_text.isdigit():
        raise BadParam("expected_task_version", f"{version_text!r} is not a whole number")
    version = int(version_text) if version_text else None
    await dash.tracker.get_task(task_id)  # NotFound: the 404 page, nothing written
    try:
        result = await dash.tracker.transition_task(
            task_id,
            trigger,
            expected_stage=expected_stage,
            expected_task_version=version,
            instructions=instructions or None,
        )
        ok, message = True, f"Moved {task_id} along {trigger!r} to stage {result.new_stage}."
    except (Conflict, InvalidTransition) as exc:
        ok, message = False, f"Not moved: {exc}"
    except Unsupported as exc:
        ok, message = False, f"This rail has no human steps: {exc}"
    except TrackerRejected as exc:
        ok, message = False, f"Refused: {exc}"
    log.info("dashboard: step %s %s: %s", trigger, task_id, message)
    if viewer.session is not None:
        viewer.session.flash, viewer.session.flash_ok = message, ok
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/tasks/{task_id}", status_code=303)
