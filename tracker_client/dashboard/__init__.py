"""The web dashboard: a server-rendered, read-only-by-default view of a rail for a browser.

``tracker serve`` mounts it at ``/ui`` (:mod:`tracker_client.serve.app`) and
``backlog-worker dashboard --tracker URL`` serves it alone, for an embedded rail or a remote
one. Pages: the queue per role, tasks (stage/state filters, paging), one task (runs, event
timeline, artifacts, spans), workers, schedules and rate limits; behind the admin token,
cancel and requeue. Plain HTML and inline CSS (no script, no external asset), Jinja2 with
autoescape for every value a task carries.

It may touch the tracker it is given (through the ``Tracker`` protocol: reads, and ``cancel`` /
``requeue`` for an authorised session), Starlette and the admin token (compared in constant
time, never written to a page, a URL or a log). It imports nothing of ``worker`` or ``plugins``.
"""

from __future__ import annotations

from tracker_client.dashboard.app import DashboardSettings, create_dashboard

__all__ = ["DashboardSettings", "create_dashboard"]
