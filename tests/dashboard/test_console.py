"""The operator console's fixes and its live task stream, over HTTP against the served app in
process: whole ids with a copy button, pipeline names, the attempt count and state after a
requeue, and the task's event stream (Server-Sent Events) with its bad inputs."""

from __future__ import annotations

import html
import json
import re

import httpx
import pytest

from tests.dashboard.conftest import PIPELINE, SCRIPT_TITLE, TOKEN, Seeded, client, dashboard_app
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import RetryPolicy, TaskCreate

pytestmark = pytest.mark.anyio

BEARER = {"Authorization": f"Bearer {TOKEN}"}
Served = tuple[httpx.AsyncClient, EmbeddedTracker, Seeded]


async def test_task_ids_are_shown_whole_with_a_copy_button(served: Served) -> None:
    http, _, ids = served
    listing = (await http.get("/ui/tasks", headers=BEARER)).text
    for task_id in (ids.script, ids.dead, ids.running):
        assert f'<code class="id">{task_id}</code>' in listing
        assert f'data-copy="{task_id}"' in listing
    assert "…" not in listing
    page = (await http.get(f"/ui/tasks/{ids.running}", headers=BEARER)).text
    assert f'<code class="id" id="task-id">{ids.running}</code>' in page


async def test_the_task_page_names_its_pipeline_without_its_id(served: Served) -> None:
    http, _, ids = served
    page = (await http.get(f"/ui/tasks/{ids.running}", headers=BEARER)).text
    assert '<dd id="task-pipeline">simple</dd>' in page
    assert ids.pipeline not in page


async def test_the_schedules_page_names_each_schedule_s_pipeline(served: Served) -> None:
    http, tracker, ids = served
    await tracker.call(
        "create_schedule", schedule="nightly", pipeline_id=ids.pipeline, cron="0 3 * * *", title="s"
    )
    page = (await http.get("/ui/schedules", headers=BEARER)).text
    assert "<td>nightly</td><td>simple</td>" in page
    assert ids.pipeline not in page


async def _requeued(tracker: EmbeddedTracker) -> str:
    """A task of two attempts that used both, then was requeued (the count starts again)."""
    pid = await tracker.create_pipeline("retrying", PIPELINE)
    policy = RetryPolicy(max_attempts=2, retry_delay_ms=0)
    task_id = await tracker.create_task(
        TaskCreate(pipeline_id=pid, title="twice", retry_policy=policy, priority=99)
    )
    for _ in range(2):
        lease = await tracker.claim("agent-r", "coder", 60_000)
        assert lease is not None and lease.task.id == task_id
        await tracker.fail(lease, "boom", retryable=True)
    assert (await tracker.get_task(task_id)).dead_letter_reason == "max_attempts_exceeded"
    await tracker.requeue(task_id)
    return task_id


def _dd(page: str, name: str) -> str:
    found = re.search(rf'<dd id="{name}">(.*?)</dd>', page, re.S)
    assert found, f"no #{name} on the page"
    return re.sub(r"<[^>]+>", "", found.group(1))


async def test_a_requeued_task_waits_afresh_and_counts_attempts_again(served: Served) -> None:
    http, tracker, _ = served
    task_id = await _requeued(tracker)
    page = (await http.get(f"/ui/tasks/{task_id}", headers=BEARER)).text
    assert 'id="task-state">waiting<' in page  # not "failed": its failed runs are history
    assert _dd(page, "task-attempts").startswith("0 of 2 since the requeue at ")
    assert "(2 runs in all)" in _dd(page, "task-attempts")
    listing = (await http.get("/ui/tasks?state=failed", headers=BEARER)).text
    assert task_id not in listing
    lease = await tracker.claim("agent-r", "coder", 60_000)
    assert lease is not None and lease.task.id == task_id
    page = (await http.get(f"/ui/tasks/{task_id}", headers=BEARER)).text
    assert 'id="task-state">running<' in page
    assert _dd(page, "task-attempts").startswith("1 of 2 since the requeue")  # not "3 of 2"
    assert "(3 runs in all)" in _dd(page, "task-attempts")
    assert 'class="r-running"' in page  # the timeline draws the live run
    assert page.count('class="before-requeue"') == 2  # the runs the count no longer holds


def _messages(body: str) -> list[tuple[str, dict[str, object], str | None]]:
    """The SSE messages of ``body``: (event name, its JSON data, its id)."""
    found = []
    for block in body.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":"
        )
        if "event" in fields:
            found.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return found


async def test_the_stream_of_a_finished_task_sends_its_events_then_its_end(
    served: Served,
) -> None:
    http, _, ids = served
    answer = await http.get(f"/ui/tasks/{ids.dead}/stream", headers=BEARER)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    messages = _messages(answer.text)
    kinds = [kind for kind, _, _ in messages]
    assert kinds[-2:] == ["task", "end"] and "rail-event" in kinds
    events = [data for kind, data, _ in messages if kind == "rail-event"]
    assert any("<img src=x onerror=" in str(e["data"]) for e in events)  # as text in JSON
    assert [str(e["id"]) for e in events] == [i for k, _, i in messages if k == "rail-event"]
    assert messages[-2][1] == {"state": "dead", "stage": "todo"}
    assert messages[-1][1] == {"outcome": "dead_lettered"}
    last = str(events[-1]["id"])
    again = await http.get(
        f"/ui/tasks/{ids.dead}/stream", headers={**BEARER, "Last-Event-ID": last}
    )
    assert [k for k, _, _ in _messages(again.text)] == ["task", "end"]  # nothing twice


async def test_the_live_page_points_its_script_at_the_stream_after_its_last_event(
    served: Served,
) -> None:
    http, tracker, ids = served
    page = (await http.get(f"/ui/tasks/{ids.running}", headers=BEARER)).text
    events = (await tracker.list_task_events(ids.running)).items
    assert f'data-src="/ui/tasks/{ids.running}/stream?after={events[-1].id}"' in page
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in page
    finished = (await http.get(f"/ui/tasks/{ids.dead}", headers=BEARER)).text
    assert 'id="live"' not in finished and "refresh" not in finished.split("</head>")[0]
    script = await http.get("/ui/static/console.js")  # no login needed: no secret in it
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in script.text and "eval(" not in script.text


@pytest.mark.parametrize(
    ("headers", "query", "status", "words"),
    [
        ({}, "?after=x1", 400, "after: 'x1' is not an event id"),
        ({"Last-Event-ID": "-3"}, "", 400, "Last-Event-ID: '-3' is not an event id"),
    ],
)
async def test_a_bad_stream_cursor_is_a_400_naming_it(
    served: Served, headers: dict[str, str], query: str, status: int, words: str
) -> None:
    http, _, ids = served
    answer = await http.get(f"/ui/tasks/{ids.running}/stream{query}", headers={**BEARER, **headers})
    assert answer.status_code == status
    assert words in html.unescape(answer.text)


async def test_the_stream_needs_a_login_and_a_known_task(served: Served) -> None:
    http, _, ids = served
    answer = await http.get(f"/ui/tasks/{ids.running}/stream")
    assert answer.status_code == 303 and "/ui/login" in answer.headers["location"]
    missing = await http.get("/ui/tasks/no-such-task/stream", headers=BEARER)
    assert missing.status_code == 404


#: A pipeline whose second stage waits for a person (docs/guarantees/backlog.md).
REVIEW = {
    "initial": "write",
    "states": {
        "write": {"agent_role": "writer"},
        "review": {"human": True},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "write", "trigger": "submit", "to": "review"},
        {"from": "review", "trigger": "approve", "to": "done"},
        {"from": "review", "trigger": "reject", "to": "write"},
    ],
}
READER = "dashboard-read-token-0123456789"


async def _at_review(tracker: EmbeddedTracker, title: str = SCRIPT_TITLE) -> str:
    """A task moved by its writer to the human step ``review``."""
    pipelines = {p.name: p.id for p in await tracker.list_pipelines()}
    pid = pipelines.get("review") or await tracker.create_pipeline("review", REVIEW)
    task_id = await tracker.create_task(TaskCreate(pipeline_id=pid, title=title))
    lease = await tracker.claim("writer-1", "writer", 60_000)
    assert lease is not None and lease.task.id == task_id
    await tracker.transition(lease, "submit")
    return task_id


async def _session(http: httpx.AsyncClient, token: str, page: str) -> str:
    """Log in with ``token`` and answer ``page`` (its HTML)."""
    answer = await http.post("/login", data={"token": token, "next": "/"})
    assert answer.status_code == 303, answer.text
    return (await http.get(page)).text


def _posts(page: str) -> list[str]:
    """The forms of the page's body that act (``POST``; the header's logout aside)."""
    return re.findall(r'<form method="post"[^>]*>', page.split("</header>", 1)[1])


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def test_the_inbox_lists_tasks_at_a_human_step_and_the_page_moves_one_on(
    embedded: tuple[EmbeddedTracker, Seeded],
) -> None:
    tracker, _ = embedded
    task_id = await _at_review(tracker)
    other = await _at_review(tracker, "second draft")
    async with client(dashboard_app(tracker, admin_token=TOKEN)) as http:
        inbox = await _session(http, TOKEN, "/inbox")
        assert task_id in inbox and other in inbox
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in inbox and "<script>alert" not in inbox
        assert "At most 200 tasks are listed per step" in inbox
        page = (await http.get(f"/tasks/{task_id}")).text
        assert 'id="step-form"' in page and 'value="approve"' in page and 'value="reject"' in page
        assert 'http-equiv="refresh"' not in page  # no reload eats the typed instructions
        form = {
            "csrf": _csrf(page),
            "trigger": "reject",
            "expected_stage": "review",
            "instructions": "cite the <b>source</b>",
        }
        answer = await http.post(f"/tasks/{task_id}/step", data=form)
        assert answer.status_code == 303 and answer.headers["location"] == f"/tasks/{task_id}"
        assert (await tracker.get_task(task_id)).stage == "write"
        lease = await tracker.claim("writer-1", "writer", 60_000)
        assert lease is not None and lease.task.id == task_id
        moves = (await tracker.list_task_events(task_id, kind="transition")).items
        assert moves[-1].data.get("instructions") == "cite the <b>source</b>"
        shown = (await http.get(f"/tasks/{task_id}")).text
        assert "Moved" in shown and "to stage write" in shown
        again = await http.post(f"/tasks/{task_id}/step", data=form)  # it moved meanwhile
        assert again.status_code == 303
        stale = (await http.get(f"/tasks/{task_id}")).text
        assert "Not moved:" in stale
        inbox = (await http.get("/inbox")).text
        assert task_id not in inbox and other in inbox


async def test_a_step_is_refused_without_csrf_and_by_a_read_only_session(
    embedded: tuple[EmbeddedTracker, Seeded],
) -> None:
    tracker, _ = embedded
    task_id = await _at_review(tracker)
    form = {"trigger": "approve", "expected_stage": "review"}
    app = dashboard_app(tracker, admin_token=TOKEN, is_reader=lambda v: v == READER)
    async with client(app) as http:
        page = await _session(http, TOKEN, f"/tasks/{task_id}")
        for csrf in (None, "not-the-token"):
            sent = form if csrf is None else {**form, "csrf": csrf}
            answer = await http.post(f"/tasks/{task_id}/step", data=sent)
            assert answer.status_code == 403 and "csrf" in answer.text
        assert 'id="step-form"' in page
    async with client(app) as http:
        page = await _session(http, READER, f"/tasks/{task_id}")
        assert 'id="step-form"' not in page and not _posts(page)
        assert 'id="step-readonly"' in page
        inbox = (await http.get("/inbox")).text
        assert task_id in inbox and not _posts(inbox)
        answer = await http.post(f"/tasks/{task_id}/step", data={**form, "csrf": _csrf(page)})
        assert answer.status_code == 403 and "read-only" in answer.text.lower()
    assert (await tracker.get_task(task_id)).stage == "review"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"trigger": ""}, "trigger: missing"),
        ({"expected_stage": "x" * 201}, "expected_stage: longer than 200 characters"),
        ({"instructions": "x" * 4001}, "instructions: longer than 4000 characters"),
        ({"expected_task_version": "two"}, "expected_task_version: 'two' is not a whole number"),
    ],
)
async def test_a_bad_step_form_is_a_400_naming_the_field(
    embedded: tuple[EmbeddedTracker, Seeded], change: dict[str, str], words: str
) -> None:
    tracker, _ = embedded
    task_id = await _at_review(tracker)
    async with client(dashboard_app(tracker, admin_token=TOKEN)) as http:
        page = await _session(http, TOKEN, f"/tasks/{task_id}")
        form = {"csrf": _csrf(page), "trigger": "approve", "expected_stage": "review", **change}
        answer = await http.post(f"/tasks/{task_id}/step", data=form)
        assert answer.status_code == 400
        assert words in html.unescape(answer.text)
    assert (await tracker.get_task(task_id)).stage == "review"


def _listed(page: str) -> set[str]:
    return set(re.findall(r'<code class="id">([^<]+)</code>', page))


async def test_search_finds_words_in_title_metadata_and_on_request_in_events(
    served: Served,
) -> None:
    http, _, ids = served
    title = (await http.get("/ui/tasks?q=BUSY", headers=BEARER)).text
    assert _listed(title) == {ids.running}
    meta = (await http.get("/ui/tasks?q=onerror+img", headers=BEARER)).text
    assert _listed(meta) == {ids.script}  # every word, in its metadata (as JSON)
    assert "found in 3 tasks read" in meta and "at most 2000 tasks" in meta
    events = "/ui/tasks?q=PERMANENT_failure"  # the dead task's dead_letter event only
    assert _listed((await http.get(events, headers=BEARER)).text) == set()
    found = (await http.get(events + "&events=on", headers=BEARER)).text
    assert _listed(found) == {ids.dead}
    assert "the first 200 events of each" in found
    both = (await http.get("/ui/tasks?q=dead&state=dead", headers=BEARER)).text
    assert _listed(both) == {ids.dead}


async def test_the_role_filter_keeps_the_tasks_of_that_role(served: Served) -> None:
    http, _, ids = served
    coder = (await http.get("/ui/tasks?role=coder", headers=BEARER)).text
    assert _listed(coder) == {ids.script, ids.dead, ids.running}
    checker = (await http.get("/ui/tasks?role=checker", headers=BEARER)).text
    assert _listed(checker) == set() and "No task matches." in checker
    paged = (await http.get("/ui/tasks?role=coder&limit=1&q=o", headers=BEARER)).text
    found = re.search(r'id="next-page" href="([^"]+)"', paged)
    assert found and "role=coder" in found.group(1) and "q=o" in found.group(1)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("role=nobody", "role: unknown role 'nobody' (known: checker, coder)"),
        ("q=" + "x" * 201, "q: longer than 200 characters"),
        ("q=x&events=yes", "events: 'yes' is not one of on"),
    ],
)
async def test_a_bad_search_is_a_400_naming_the_parameter(
    served: Served, query: str, words: str
) -> None:
    http, _, _ = served
    answer = await http.get(f"/ui/tasks?{query}", headers=BEARER)
    assert answer.status_code == 400
    assert words in html.unescape(answer.text)


def _boxes(page: str, graph: str) -> dict[str, str]:
    """The boxes of the SVG graph ``graph`` on the page: name -> its second line."""
    found = re.search(rf'<svg id="{graph}".*?</svg>', page, re.S)
    assert found, f"no #{graph} on the page"
    return dict(
        re.findall(
            r'data-name="([^"]*)">\s*<rect[^>]*/>\s*<text[^>]*>[^<]*</text>\s*'
            r'<text[^>]*class="note">([^<]*)</text>',
            found.group(0),
        )
    )


async def test_each_pipeline_is_drawn_with_its_tasks_per_stage(served: Served) -> None:
    http, tracker, _ = served
    await _at_review(tracker, "a <b>draft</b>")
    page = (await http.get("/ui/pipelines", headers=BEARER)).text
    simple = _boxes(page, "graph-2")  # pipelines by name: review, simple
    assert simple == {
        "todo": "role coder · 3",
        "check": "role checker · 0",
        "done": "terminal · 0",
        "dead": "terminal · 0",
    }
    review = _boxes(page, "graph-1")
    assert review["review"] == "human step · 1" and review["write"] == "role writer · 0"
    assert ">approve</text>" in page and ">reject</text>" in page  # the arrows' triggers
    assert 'href="/ui/tasks?pipeline=simple&amp;stage=todo"' in page
    assert "<b>draft" not in page  # the pipeline picture shows no task titles at all
    assert '<script src="/ui/static/console.js" defer></script>' in page


async def test_a_task_is_drawn_among_its_parent_dependencies_and_subtasks(
    served: Served,
) -> None:
    http, tracker, ids = served
    child = await tracker.create_task(
        TaskCreate(pipeline_id=ids.pipeline, title="child <i>one</i>", parent_id=ids.script)
    )
    needs = await tracker.create_task(
        TaskCreate(pipeline_id=ids.pipeline, title="after it", dependencies=[ids.script])
    )
    page = (await http.get(f"/ui/tasks/{ids.script}", headers=BEARER)).text
    boxes = _boxes(page, "relations")
    assert boxes["child &lt;i&gt;one&lt;/i&gt;"] == "simple / todo"
    assert f'href="/ui/tasks/{child}"' in page
    assert "found among the 2 tasks created after it" in page
    child_page = (await http.get(f"/ui/tasks/{child}", headers=BEARER)).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in str(_boxes(child_page, "relations"))
    later = (await http.get(f"/ui/tasks/{needs}", headers=BEARER)).text
    assert f'href="/ui/tasks/{ids.script}"' in later.split('id="relations"')[1]
    lonely = (await http.get(f"/ui/tasks/{ids.dead}", headers=BEARER)).text
    assert 'id="relations"' not in lonely


def _bars(page: str, chart: str) -> list[str]:
    """The tooltips of the bars of ``chart`` on the page."""
    found = re.search(rf'<svg id="{chart}".*?</svg>', page, re.S)
    assert found, f"no #{chart} on the page"
    return re.findall(r"<title>([^<]*)</title>", found.group(0))


async def test_the_charts_count_runs_failures_and_dead_letters_from_the_rail(
    served: Served,
) -> None:
    http, tracker, _ = served
    await _requeued(tracker)  # two failed runs more, now waiting afresh
    page = (await http.get("/ui/charts?window=1h", headers=BEARER)).text
    assert "the 4 tasks created in the last 1h and their 4 runs" in page
    assert "at most 500 tasks" in page and "One bar per 5 minutes" in page
    ended = _bars(page, "chart-throughput")
    assert sum(int(t.split(": ")[1].split()[0]) for t in ended if "failed" in t) == 3
    failures = _bars(page, "chart-failures")
    assert sum(int(t.split(": ")[1].split()[0]) for t in failures) == 3
    assert _bars(page, "chart-dead") == ["coder: 1 dead-lettered"]
    assert _bars(page, "chart-pickup")  # three tasks were picked up
    assert "<script>alert" not in page


@pytest.mark.parametrize("window", ["2h", "x" * 60])
async def test_a_bad_chart_window_is_a_400_naming_it(served: Served, window: str) -> None:
    http, _, _ = served
    answer = await http.get(f"/ui/charts?window={window}", headers=BEARER)
    assert answer.status_code == 400
    assert "window: " in answer.text and "is not one of 1h, 24h, 7d" in html.unescape(answer.text)


async def _open(tracker: EmbeddedTracker) -> list[str]:
    """The ids of the rail's tasks neither dead-lettered nor finished."""
    page = await tracker.list_tasks(limit=200)
    return [t.id for t in page.items if t.dead_letter_reason is None and t.stage != "done"]


async def test_bulk_cancel_and_requeue_preview_then_act(
    embedded: tuple[EmbeddedTracker, Seeded],
) -> None:
    tracker, ids = embedded
    async with client(dashboard_app(tracker, admin_token=TOKEN)) as http:
        page = await _session(http, TOKEN, "/bulk?action=cancel&pipeline=simple")
        assert "2 open tasks would be cancelled." in page
        assert _listed(page) == {ids.script, ids.running}
        assert sorted(await _open(tracker)) == sorted([ids.script, ids.running])  # untouched
        form = {"csrf": _csrf(page), "pipeline": "simple", "role": "", "reason": ""}
        done = await http.post("/bulk/cancel", data=form)
        assert done.status_code == 303
        assert done.headers["location"] == "/bulk?action=cancel&pipeline=simple"
        assert await _open(tracker) == []
        after = (await http.get(done.headers["location"])).text
        assert "Cancelled 2 tasks." in after and "0 open tasks would be cancelled." in after
        assert 'id="confirm-form"' not in after  # nothing left to cancel
        preview = html.unescape((await http.get("/bulk?action=requeue&pipeline=simple")).text)
        assert "3 dead-lettered tasks would be requeued (the rail's own dry run)" in preview
        assert "2 cancelled, 1 permanent_failure" in preview
        one = (await http.get("/bulk?action=requeue&pipeline=simple&reason=cancelled")).text
        assert "2 dead-lettered tasks would be requeued" in one
        assert _listed(one) == {ids.script, ids.running}
        form = {"csrf": _csrf(one), "pipeline": "simple", "reason": "cancelled"}
        done = await http.post("/bulk/requeue", data=form)
        assert done.status_code == 303
        assert sorted(await _open(tracker)) == sorted([ids.script, ids.running])
        assert (await tracker.get_task(ids.dead)).dead_letter_reason == "permanent_failure"
        assert "Requeued 2 tasks." in (await http.get(done.headers["location"])).text


async def test_bulk_actions_are_refused_without_csrf_and_by_a_read_only_session(
    embedded: tuple[EmbeddedTracker, Seeded],
) -> None:
    tracker, _ = embedded
    app = dashboard_app(tracker, admin_token=TOKEN, is_reader=lambda v: v == READER)
    form = {"pipeline": "simple"}
    async with client(app) as http:
        await _session(http, TOKEN, "/bulk")
        for sent in (form, {**form, "csrf": "forged"}):
            for action in ("cancel", "requeue"):
                answer = await http.post(f"/bulk/{action}", data=sent)
                assert answer.status_code == 403 and "csrf" in answer.text
    async with client(app) as http:
        page = await _session(http, READER, "/bulk?action=cancel&pipeline=simple")
        assert "2 open tasks would be cancelled." in page
        assert not _posts(page) and 'id="bulk-readonly"' in page
        for action in ("cancel", "requeue"):
            answer = await http.post(f"/bulk/{action}", data={**form, "csrf": _csrf(page)})
            assert answer.status_code == 403 and "read-only" in answer.text.lower()
    assert len(await _open(tracker)) == 2
    assert (await tracker.list_tasks(limit=200)).items[0].dead_letter_reason is not None


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("action=drop", "action: 'drop' is not one of cancel, requeue"),
        ("action=requeue", "pipeline: a requeue needs the pipeline"),
        ("action=requeue&pipeline=simple&role=coder", "role: a requeue takes a pipeline"),
        ("action=cancel", "pipeline: a cancel needs a pipeline, a role or both"),
        ("action=cancel&role=ghost", "role: unknown role 'ghost' (known: checker, coder)"),
        ("action=cancel&pipeline=nope", "pipeline: unknown pipeline 'nope' (known: simple)"),
        ("action=cancel&role=coder&reason=x", "reason: a cancel takes a pipeline and/or a role"),
    ],
)
async def test_a_bad_bulk_choice_is_a_400_naming_it(served: Served, query: str, words: str) -> None:
    http, tracker, _ = served
    answer = await http.get(f"/ui/bulk?{query}", headers=BEARER)
    assert answer.status_code == 400
    assert words in html.unescape(answer.text)
    assert len(await _open(tracker)) == 2


async def test_the_console_s_pages_and_actions_keep_the_host_and_origin_checks(
    served: Served,
) -> None:
    http, tracker, ids = served
    pages = ["/ui/inbox", "/ui/pipelines", "/ui/charts", "/ui/bulk", "/ui/static/console.js"]
    pages += [f"/ui/tasks/{ids.dead}/stream", "/ui/tasks?q=busy"]  # a finished task's stream
    for path in [*pages, f"/ui/tasks/{ids.running}/stream"]:
        rebound = await http.get(path, headers={**BEARER, "Host": "evil.example"})
        assert rebound.status_code == 421, path
    for path in pages:
        page = await http.get(path, headers=BEARER)
        assert page.headers["x-frame-options"] == "DENY", path
        assert "default-src 'none'" in page.headers["content-security-policy"], path
    for path in (f"/ui/tasks/{ids.script}/step", "/ui/bulk/cancel", "/ui/bulk/requeue"):
        forged = await http.post(
            path, data={"pipeline": "simple"}, headers={"Origin": "http://evil.example"}
        )
        assert forged.status_code == 403, path
    assert len(await _open(tracker)) == 2
