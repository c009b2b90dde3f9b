"""The web dashboard: a server-rendered, read-only-by-default view of a rail for a browser.

``tracker serve`` mounts it at ``/ui`` (:mod:`tracker_client.serve.app`) and
``backlog-worker dashboard --tracker URL`` serves it alone, for an embedded rail or a remote
one. Pages: the queue per role, tasks (search, filters, paging), one task (runs, timeline,
relations, live events, artifacts, spans), pipelines as state machines, charts of the rail over
time, the inbox of human steps, bulk actions, workers, schedules and rate limits; behind the
admin token, cancel, requeue, human steps and bulk actions. HTML, inline CSS and inline SVG drawn
on the server, one static script of its own (every page works without it; no external asset),
Jinja2 with autoescape for every value a task carries (docs/operate/dashboard.md).

It may touch the tracker it is given (through the ``Tracker`` protocol: reads, and ``cancel``,
``requeue``, ``transition_task``, ``cancel_all`` and ``requeue_all`` for an authorised
session), Starlette and the admin token (compared in constant time, never written to a page, a
URL or a log). It imports nothing of ``worker`` or ``plugins``.
"""

from __future__ import annotations

from tracker_client.dashboard.app import DashboardSettings, create_dashboard

__all__ = ["DashboardSettings", "create_dashboard"]
