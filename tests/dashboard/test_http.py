"""The dashboard over plain HTTP (httpx against the served app in process): auth, escaping,
CSRF, the read-only default, and a 404 or 400 page for each bad input, with nothing written."""

from __future__ import annotations

import re
from typing import Any

import anyio
import httpx
import pytest

from tests.dashboard.conftest import MARKUP, TOKEN, Seeded, client, dashboard_app
from tracker_client.dashboard.auth import Sessions
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.anyio

BEARER = {"Authorization": f"Bearer {TOKEN}"}
_FORM = "application/x-www-form-urlencoded"
Served = tuple[httpx.AsyncClient, EmbeddedTracker, Seeded]


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


async def _login(http: httpx.AsyncClient) -> None:
    answer = await http.post("/ui/login", data={"token": TOKEN, "next": "/ui/tasks"})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/tasks"


#: The one script element a page may hold: the dashboard's own file, no inline code.
OWN_SCRIPT = re.compile(r'<script src="(/ui)?/static/console\.js" defer></script>')


def _no_script(html: str) -> None:
    """No script element but the dashboard's own file, no event-handler markup, and the script
    title shown as text."""
    assert "<script" not in OWN_SCRIPT.sub("", html).lower()
    assert MARKUP not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def test_a_protected_rail_redirects_to_the_login_form_and_refuses_posts(
    served: Served,
) -> None:
    http, tracker, ids = served
    for path in ("/ui/", "/ui/tasks", f"/ui/tasks/{ids.script}", "/ui/workers", "/ui/nowhere"):
        answer = await http.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/ui/login?next=%2Fui%2F")
        assert "set-cookie" not in answer.headers
    answer = await http.post(f"/ui/tasks/{ids.running}/cancel", data={"csrf": "x"})
    assert answer.status_code == 401
    wrong = await http.get("/ui/", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401
    assert "Login required" in wrong.text
    assert (await tracker.get_task(ids.running)).dead_letter_reason is None
    login = await http.get("/ui/login")
    assert login.status_code == 200
    assert 'type="password" name="token"' in login.text
    assert (await http.get("/tasks")).status_code == 401  # the API keeps its own auth


async def test_login_sets_a_strict_http_only_session_cookie_never_holding_the_token(
    served: Served,
) -> None:
    http, _, _ = served
    failed = await http.post("/ui/login", data={"token": "wrong", "next": "/ui/"})
    assert failed.status_code == 401
    assert "That is not the admin token" in failed.text
    assert "set-cookie" not in failed.headers
    answer = await http.post("/ui/login", data={"token": TOKEN, "next": "/ui/tasks"})
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert "Path=/ui" in cookie
    assert TOKEN not in cookie
    assert TOKEN not in answer.headers["location"]
    page = await http.get("/ui/tasks")
    assert page.status_code == 200
    assert TOKEN not in page.text
    assert "Log out" in page.text
    logout = await http.post("/ui/logout", data={"csrf": _csrf(page.text)})
    assert logout.status_code == 303
    assert (await http.get("/ui/")).status_code == 303  # the session is gone


@pytest.mark.parametrize("target", ["https://elsewhere.example/", "//elsewhere/", "/tasks", ""])
async def test_login_only_goes_on_to_a_dashboard_page(served: Served, target: str) -> None:
    http, _, _ = served
    answer = await http.post("/ui/login", data={"token": TOKEN, "next": target})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/"


async def test_every_page_shows_task_fields_as_text(served: Served) -> None:
    http, _, ids = served
    for path in ("/ui/tasks", f"/ui/tasks/{ids.script}", f"/ui/tasks/{ids.running}"):
        answer = await http.get(path, headers=BEARER)
        assert answer.status_code == 200, path
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self';" in policy  # the dashboard's own file only
        assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
        assert "unsafe-eval" not in policy
        _no_script(answer.text)
    task = (await http.get(f"/ui/tasks/{ids.script}", headers=BEARER)).text
    assert "javascript:alert(3)" in task  # the artifact's URI, as text
    assert 'href="javascript' not in task
    dead = (await http.get(f"/ui/tasks/{ids.dead}", headers=BEARER)).text
    assert "<b>bold</b>" not in dead
    assert "&lt;b&gt;bold&lt;/b&gt;" in dead
    assert "permanent_failure" in dead


async def test_the_queue_page_counts_per_role_and_refreshes_itself(served: Served) -> None:
    http, _, _ = served
    page = (await http.get("/ui/", headers=BEARER)).text
    row = re.search(r"<tr>\s*<td>coder</td>(.*?)</tr>", page, re.S)
    assert row, page
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1))
    assert cells[:3] == ["1", "1", "1"]  # waiting, claimable, running
    assert cells[5] == "1"  # dead-lettered
    assert '<meta http-equiv="refresh" content="5">' in page
    stopped = (await http.get("/ui/?refresh=off", headers=BEARER)).text
    assert 'http-equiv="refresh"' not in stopped
    assert 'href="/ui/tasks?refresh=off"' in stopped  # the choice is kept while browsing


async def test_tasks_filter_by_state_and_stage_and_page_with_the_cursor(served: Served) -> None:
    http, _, ids = served
    dead = (await http.get("/ui/tasks?state=dead", headers=BEARER)).text
    assert ids.dead in dead and ids.running not in dead and ids.script not in dead
    running = (await http.get("/ui/tasks?state=running&pipeline=simple", headers=BEARER)).text
    assert ids.running in running and ids.dead not in running
    check = (await http.get("/ui/tasks?stage=check", headers=BEARER)).text
    assert "No task matches" in check and ids.running not in check
    seen: list[str] = []
    url: str | None = "/ui/tasks?limit=1"
    while url:
        page = (await http.get(url, headers=BEARER)).text
        seen += re.findall(r'href="/ui/tasks/([0-9a-f-]{36})"', page)
        found = re.search(r'id="next-page" href="([^"]+)"', page)
        url = found.group(1).replace("&amp;", "&") if found else None
        assert len(seen) <= 4
    assert sorted(set(seen)) == sorted({ids.dead, ids.running, ids.script})


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("state=bogus", "state"),
        ("limit=0", "limit"),
        ("limit=many", "limit"),
        ("limit=201", "limit"),
        ("cursor=zz", "cursor"),
        ("pipeline=nope", "pipeline"),
        ("stage=nope", "stage"),
        ("refresh=maybe", "refresh"),
    ],
)
async def test_a_bad_filter_is_a_400_page_naming_the_parameter(
    served: Served, query: str, name: str
) -> None:
    http, _, _ = served
    answer = await http.get(f"/ui/tasks?{query}", headers=BEARER)
    assert answer.status_code == 400
    message = re.search(r'<p id="error">([^<]*)</p>', answer.text)
    assert message and message.group(1).startswith(f"{name}: "), answer.text


async def test_a_bad_events_cursor_and_an_unknown_task_are_named(served: Served) -> None:
    http, tracker, ids = served
    bad = await http.get(f"/ui/tasks/{ids.script}?events_cursor=zz", headers=BEARER)
    assert bad.status_code == 400
    assert "events_cursor: " in bad.text
    missing = await http.get("/ui/tasks/no-such-task", headers=BEARER)
    assert missing.status_code == 404
    assert "no-such-task" in missing.text
    before = await tracker.list_tasks(limit=100)
    post = await http.post("/ui/tasks/no-such-task/cancel", headers=BEARER, data={})
    assert post.status_code == 404
    assert (await http.post(f"/ui/tasks/{ids.dead}/explode", headers=BEARER)).status_code == 404
    assert await tracker.list_tasks(limit=100) == before


async def test_cancel_and_requeue_need_the_session_csrf_token(served: Served) -> None:
    http, tracker, ids = served
    await _login(http)
    page = (await http.get(f"/ui/tasks/{ids.running}")).text
    assert 'id="cancel-form"' in page and 'id="requeue-form"' not in page
    for data in ({}, {"csrf": "forged"}):
        refused = await http.post(f"/ui/tasks/{ids.running}/cancel", data=data)
        assert refused.status_code == 403
        assert "csrf: " in refused.text
    assert (await tracker.get_task(ids.running)).dead_letter_reason is None
    done = await http.post(
        f"/ui/tasks/{ids.running}/cancel", data={"csrf": _csrf(page), "reason": "by hand"}
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"/ui/tasks/{ids.running}"
    shown = (await http.get(done.headers["location"])).text
    assert f"Cancelled {ids.running}" in shown and "its lease revoked" in shown
    assert (await tracker.get_task(ids.running)).dead_letter_reason == "by hand"
    again = (await http.get(f"/ui/tasks/{ids.running}")).text
    assert "Cancelled" not in again  # the result is shown once
    assert 'id="requeue-form"' in again
    requeued = await http.post(f"/ui/tasks/{ids.dead}/requeue", data={"csrf": _csrf(again)})
    assert requeued.status_code == 303
    assert "Requeued" in (await http.get(requeued.headers["location"])).text
    task = await tracker.get_task(ids.dead)
    assert task.dead_letter_reason is None and task.stage == "todo"
    twice = await http.post(f"/ui/tasks/{ids.script}/requeue", data={"csrf": _csrf(again)})
    assert "Not requeued" in (await http.get(twice.headers["location"])).text


async def test_a_bearer_header_acts_without_a_csrf_token(served: Served) -> None:
    http, tracker, ids = served
    answer = await http.post(f"/ui/tasks/{ids.script}/cancel", headers=BEARER, data={})
    assert answer.status_code == 303
    assert (await tracker.get_task(ids.script)).dead_letter_reason == "cancelled"


async def test_an_open_rail_is_read_only_by_default(open_rail: Served) -> None:
    http, tracker, ids = open_rail
    page = await http.get(f"/ui/tasks/{ids.running}")
    assert page.status_code == 200
    assert "cancel-form" not in page.text and "Read-only" in page.text
    assert "set-cookie" not in page.headers
    refused = await http.post(f"/ui/tasks/{ids.running}/cancel", data={})
    assert refused.status_code == 403
    assert "read-only" in refused.text
    assert (await tracker.get_task(ids.running)).dead_letter_reason is None
    assert (await http.get("/ui/login")).status_code == 303  # nothing to log in to
    slash = await http.get("/ui")
    assert slash.status_code == 307 and slash.headers["location"].endswith("/ui/")


async def test_allow_actions_opts_an_open_rail_in(embedded: tuple[EmbeddedTracker, Seeded]) -> None:
    tracker, ids = embedded
    async with client(dashboard_app(tracker, allow_actions=True)) as http:
        page = await http.get(f"/tasks/{ids.running}")
        assert "HttpOnly" in page.headers["set-cookie"]
        assert (await http.post(f"/tasks/{ids.running}/cancel", data={})).status_code == 403
        done = await http.post(f"/tasks/{ids.running}/cancel", data={"csrf": _csrf(page.text)})
        assert done.status_code == 303
    assert (await tracker.get_task(ids.running)).dead_letter_reason == "cancelled"


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"json": {"token": TOKEN}}, 415),
        ({"data": {"token": "x" * 9000}}, 413),
        ({"content": b"token=a&token=b", "headers": {"content-type": _FORM}}, 400),
        ({"content": b"token=%ff", "headers": {"content-type": _FORM}}, 401),
    ],
)
async def test_a_bad_login_form_is_refused_with_no_session(
    served: Served, kwargs: dict[str, Any], status: int
) -> None:
    http, _, _ = served
    answer = await http.post("/ui/login", **kwargs)
    assert answer.status_code == status, answer.text
    assert "set-cookie" not in answer.headers


async def test_pages_of_a_rail_without_an_extension_say_so(
    embedded: tuple[EmbeddedTracker, Seeded],
) -> None:
    tracker, ids = embedded
    async with client(dashboard_app(_Bare(tracker))) as http:
        workers = await http.get("/workers")
        assert workers.status_code == 200
        assert "not available on this rail" in workers.text
        task = await http.get(f"/tasks/{ids.running}")
        assert task.status_code == 200
        assert "Spans are not available on this rail" in task.text
        schedules = (await http.get("/schedules")).text
        assert "Schedules are not available" in schedules
        assert "Rate limits are not available" in schedules


async def test_spans_and_workers_are_shown_when_the_rail_has_them(served: Served) -> None:
    http, tracker, ids = served
    extensions = (await tracker.capabilities()).extensions
    task = (await http.get(f"/ui/tasks/{ids.running}", headers=BEARER)).text
    workers = (await http.get("/ui/workers", headers=BEARER)).text
    _no_script(task)
    assert MARKUP not in workers
    if "spans" in extensions:
        assert "executor &lt;script&gt;alert(1)&lt;/script&gt;" in task
        assert "1s" in task  # the span's 1.5 s, in whole seconds
    else:
        assert "Spans are not available" in task
    if "workers" in extensions:
        assert "worker-a" in workers and "host &lt;img" in workers
        assert f'href="/ui/tasks/{ids.running}"' in workers  # what it runs now
    else:
        assert "not available on this rail" in workers


async def test_repeated_failed_logins_are_throttled(served: Served) -> None:
    http, _, _ = served
    for _ in range(10):
        assert (await http.post("/ui/login", data={"token": "guess"})).status_code == 401
    blocked = await http.post("/ui/login", data={"token": TOKEN})
    assert blocked.status_code == 429  # even the right token waits out the window
    assert int(blocked.headers["retry-after"]) >= 1
    assert "set-cookie" not in blocked.headers


def test_the_session_table_is_bounded() -> None:
    sessions = Sessions(limit=2)
    first, second, third = sessions.open(), sessions.open(), sessions.open()
    assert len(sessions) == 2
    assert sessions.get(first.id) is None
    assert sessions.get(second.id) is second and sessions.get(third.id) is third
    assert first.csrf != second.csrf and first.id != first.csrf


class _Bare:
    """A rail without the spans, workers, schedules and rate-limit extensions: the embedded
    one with those operations answering ``Unsupported``, as a plain NullTickets does."""

    def __init__(self, tracker: EmbeddedTracker) -> None:
        self._tracker = tracker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tracker, name)

    async def call(self, operation: str, *params: str, **arguments: Any) -> Any:
        from tracker_client.errors import Unsupported

        if operation in ("list_spans", "list_workers", "list_schedules", "list_rate_limits"):
            raise Unsupported(f"{operation}: not on this rail")
        return await self._tracker.call(operation, *params, **arguments)


async def test_a_crash_looped_task_names_its_count_and_knob(served: Served) -> None:
    http, tracker, ids = served
    task_id = await tracker.create_task(
        TaskCreate(pipeline_id=ids.pipeline, title="oom", priority=99, max_stale_attempts=1)
    )
    assert (await tracker.claim("agent-9", "coder", 1)) is not None  # 1 ms: its worker is gone
    with anyio.fail_after(10):
        while not (await tracker.maintenance()).crash_looped:
            await anyio.sleep(0.005)
    page = (await http.get(f"/ui/tasks/{task_id}", headers=BEARER)).text
    note = re.search(r'<span class="muted" id="dead-note">([^<]*)</span>', page)
    assert note is not None, page
    assert "lease expired 1 time in a row" in note.group(1)
    assert "the task&#39;s max_stale_attempts = 1" in note.group(1)
    assert re.search(r'id="task-stale">1 in a row \(crash-loop limit 1\)', page)
