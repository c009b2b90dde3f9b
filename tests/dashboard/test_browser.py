"""The dashboard in a real browser: Debian's chromium, headless, with JavaScript off, driven by
Playwright, against a real ``tracker serve`` process with an admin token.

Each page is loaded and its rendered DOM checked (the script title is text, no script element
was injected, no dialog opened); the login form, the cancel and requeue buttons are used as an
operator would, and their effect is read back from the rail. A screenshot of each page is kept
in ``$BW_TEST_ARTIFACTS/dashboard`` (else ``.test-artifacts/dashboard``). Without chromium the
test skips saying how to install it; in CI (``CI=true``) it fails instead.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import needs
from tests.dashboard.conftest import SCRIPT_TITLE, TOKEN, Seeded, artifacts_dir, process, seed_file
from tracker_client.models import TaskDetail

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _require_browser() -> None:
    missing = []
    if not CHROMIUM.exists():
        missing.append("Debian's chromium (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[test]')")
    if missing:
        needs.missing(
            "the dashboard's browser test needs " + " and ".join(missing) + " (.ci/run installs "
            "chromium)"
        )


@dataclass
class Browser:
    """A served rail, its seeded ids and a chromium page (JavaScript off) on it."""

    url: str
    ids: Seeded
    page: Any
    dialogs: list[str]
    shots: Path
    pw_browser: Any = None
    console: list[str] = field(default_factory=list)
    _scripted: Any = None

    def go(self, path: str) -> Any:
        response = self.page.goto(self.url + path)
        assert response is not None
        return response

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def task(self, task_id: str) -> TaskDetail:
        """The task as the rail's API answers it now (Playwright holds this thread's loop)."""
        answer = httpx.get(
            f"{self.url}/tasks/{task_id}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert answer.status_code == 200, answer.text
        return TaskDetail.model_validate(answer.json())

    def no_script(self, page: Any = None) -> None:
        """No script element but the dashboard's own file, no handler markup, no dialog."""
        page = page or self.page
        scripts = page.locator("script")
        sources = [
            [scripts.nth(i).get_attribute("src"), scripts.nth(i).text_content()]
            for i in range(scripts.count())
        ]
        assert sources == [["/ui/static/console.js", ""]], sources
        assert page.locator("[onerror], [onload], [onclick]").count() == 0
        assert self.dialogs == []

    def api(self, method: str, path: str, body: Any = None, token: str = TOKEN) -> Any:
        """Call the served rail's API (Playwright holds this thread's loop: plain httpx)."""
        answer = httpx.request(
            method, self.url + path, json=body, headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code < 300, answer.text
        return answer.json() if answer.content else None

    def scripted(self) -> Any:
        """A second chromium page with JavaScript on, logged in (the live page's)."""
        if self._scripted is None:
            context = self.pw_browser.new_context(
                java_script_enabled=True, viewport={"width": 1280, "height": 800}
            )
            page = context.new_page()
            page.set_default_timeout(20_000)
            page.on("dialog", self._dialog)
            page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
            page.goto(self.url + "/ui/login")
            page.fill("#login input[name=token]", TOKEN)
            page.click("#login button")
            assert "/ui/login" not in page.url
            self._scripted = page
        return self._scripted

    def _dialog(self, d: Any) -> None:  # an alert() that ran: the test fails on it
        self.dialogs.append(d.message)
        d.dismiss()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """``tracker serve`` on a seeded rail (admin token from a file) and a fresh chromium."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    tmp = tmp_path_factory.mktemp("dashboard-browser")
    ids = seed_file(tmp / "rail.db")
    (tmp / "token").write_text(TOKEN + "\n")
    args = ["tracker", "serve", "--tracker", f"sqlite:///{tmp / 'rail.db'}", "--port", "0"]
    profile = tempfile.mkdtemp(prefix="bw-chromium-")
    try:
        with (
            process([*args, "--token-file", str(tmp / "token")], tmp / "serve.log") as url,
            sync_playwright() as pw,
        ):
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=ARGS,
                java_script_enabled=False,
                viewport={"width": 1280, "height": 800},
            )
            try:
                page = context.new_page()
                page.set_default_timeout(20_000)
                dialogs: list[str] = []

                def dialog(d: Any) -> None:  # an alert() that ran: the test fails on it
                    dialogs.append(d.message)
                    d.dismiss()

                page.on("dialog", dialog)
                scripted = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                try:
                    yield Browser(url, ids, page, dialogs, artifacts_dir(), scripted)
                finally:
                    scripted.close()
            finally:
                context.close()
        assert TOKEN not in (tmp / "serve.log").read_text()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.timeout(120)
def test_without_the_token_the_browser_gets_the_login_form(browser: Browser) -> None:
    browser.go("/ui/tasks")
    assert browser.page.url == f"{browser.url}/ui/login?next=%2Fui%2Ftasks"
    assert browser.page.locator("#login input[name=token]").count() == 1
    browser.shot("login")
    browser.page.fill("#login input[name=token]", "not-the-token")
    browser.page.click("#login button")
    assert "That is not the admin token" in browser.page.inner_text("#login-failed")
    assert TOKEN not in browser.page.content()
    browser.page.fill("#login input[name=token]", TOKEN)
    browser.page.click("#login button")
    assert browser.page.url == f"{browser.url}/ui/tasks"  # where it was going
    assert TOKEN not in browser.page.url and TOKEN not in browser.page.content()
    cookies = browser.page.context.cookies()
    (session,) = [c for c in cookies if c["name"] == "bw_dashboard"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and session["path"] == "/ui"
    assert TOKEN not in session["value"]


@pytest.mark.timeout(120)
def test_each_page_renders_as_text_in_chromium(browser: Browser) -> None:
    _logged_in(browser)
    ids = browser.ids
    assert browser.go("/ui/").status == 200
    assert "coder" in browser.page.inner_text("#queue")
    assert browser.page.locator('meta[http-equiv="refresh"]').count() == 1
    browser.no_script()
    browser.shot("queue")

    assert browser.go("/ui/tasks").status == 200
    for task_id in (ids.script, ids.dead, ids.running):  # whole ids, not 8 characters
        assert browser.page.locator(f'#tasks code.id:text-is("{task_id}")').count() == 1
    titles = browser.page.locator("#tasks td.title").all_inner_texts()
    assert SCRIPT_TITLE in titles and "busy one" in titles and "to be dead" in titles
    browser.no_script()
    browser.shot("tasks")
    browser.page.select_option("#filters select[name=state]", "dead")
    browser.page.click("#filters button")
    assert browser.page.locator("#tasks td.title").all_inner_texts() == ["to be dead"]

    assert browser.go(f"/ui/tasks/{ids.script}").status == 200
    assert browser.page.inner_text("#task-title") == SCRIPT_TITLE
    assert "<img src=x" in browser.page.inner_text("#task-metadata")
    assert "javascript:alert(3)" in browser.page.inner_text("#artifacts")
    browser.no_script()
    browser.shot("task")

    assert browser.go(f"/ui/tasks/{ids.running}").status == 200
    assert browser.page.inner_text("#task-state") == "running"
    # Scripts off: the live part degrades to a reload while the task is open.
    assert browser.page.locator('noscript meta[http-equiv="refresh"]').count() == 1
    assert "turn scripts on" in browser.page.inner_text("#live-status")
    assert "agent-2" in browser.page.inner_text("#runs")
    assert SCRIPT_TITLE in browser.page.inner_text("#events")
    browser.no_script()
    browser.shot("task-running")

    assert browser.go("/ui/workers").status == 200
    browser.no_script()
    browser.shot("workers")
    assert browser.go("/ui/schedules").status == 200
    browser.no_script()
    browser.shot("schedules")

    assert browser.go("/ui/tasks/no-such-task").status == 404
    assert "no-such-task" in browser.page.inner_text("#error")
    assert browser.go("/ui/tasks?state=bogus").status == 400
    assert browser.page.inner_text("#error").startswith("state: ")

    browser.go("/ui/")
    browser.page.click("#refresh-toggle")
    assert browser.page.url.endswith("refresh=off")
    assert browser.page.locator('meta[http-equiv="refresh"]').count() == 0


@pytest.mark.timeout(120)
def test_cancel_and_requeue_buttons_act_on_the_rail(browser: Browser) -> None:
    _logged_in(browser)
    running = browser.ids.running
    browser.go(f"/ui/tasks/{running}")
    browser.page.fill("#cancel-form input[name=reason]", "stopped from the dashboard")
    browser.page.click("#cancel")
    assert browser.page.url == f"{browser.url}/ui/tasks/{running}"
    assert f"Cancelled {running}" in browser.page.inner_text(".flash")
    assert browser.page.inner_text("#task-state") == "dead"
    assert browser.task(running).dead_letter_reason == "stopped from the dashboard"
    browser.shot("task-cancelled")
    browser.page.click("#requeue")
    assert "Requeued" in browser.page.inner_text(".flash")
    task = browser.task(running)
    assert task.dead_letter_reason is None and task.stage == "todo"
    assert browser.page.inner_text("#task-state") == "waiting"  # afresh: its run is history
    attempts = browser.page.inner_text("#task-attempts")
    assert attempts.startswith("0 of ") and "since the requeue" in attempts, attempts
    assert "(1 run in all)" in attempts  # not "1 of N": the cancelled run is not counted
    browser.no_script()


def _logged_in(browser: Browser) -> None:
    browser.go("/ui/login")
    if browser.page.locator("#login").count():
        browser.page.fill("#login input[name=token]", TOKEN)
        browser.page.click("#login button")
    assert "/ui/login" not in browser.page.url


#: A pipeline of its own for the live test (its role is claimed by the test alone).
LIVE_PIPELINE = {
    "initial": "work",
    "states": {"work": {"agent_role": "streamer"}, "done": {"terminal": True}},
    "transitions": [{"from": "work", "trigger": "complete", "to": "done"}],
}


@pytest.mark.timeout(120)
def test_the_live_task_page_streams_events_in_with_javascript_on(browser: Browser) -> None:
    pid = browser.api("POST", "/pipelines", {"name": "live", "definition": LIVE_PIPELINE})["id"]
    task_id = browser.api("POST", "/tasks", {"pipeline_id": pid, "title": "watch me"})["id"]
    lease = browser.api(
        "POST", "/leases/claim", {"agent_id": "agent-live", "agent_role": "streamer"}
    )
    run_id, token = lease["run"]["id"], lease["lease_token"]
    page = browser.scripted()
    page.goto(f"{browser.url}/ui/tasks/{task_id}")
    page.wait_for_selector('#live[data-live="open"]')
    assert page.locator('meta[http-equiv="refresh"]').count() == 0  # the script streams instead
    assert page.inner_text("#task-state") == "running"
    browser.api(
        "POST", f"/runs/{run_id}/events", {"kind": "log", "data": {"line": SCRIPT_TITLE}}, token
    )
    row = page.wait_for_selector("#events tr.live-event")  # in, without a reload
    assert SCRIPT_TITLE in row.inner_text()  # as text: the title is no script
    browser.api(
        "POST", f"/runs/{run_id}/events", {"kind": "log", "data": {"line": "second"}}, token
    )
    page.locator("#events tr.live-event").nth(1).wait_for()  # (no eval: the CSP forbids it)
    copy = page.locator("#task-id + button.copy")
    copy.wait_for(state="visible")  # the script reveals the copy button
    copy.click()  # copied, or (no clipboard granted) the id selected for Ctrl+C
    page.locator("#task-id + button.copy:text-matches('copied|selected')").wait_for()
    page.screenshot(path=str(browser.shots / "task-live.png"), full_page=True)
    browser.api("POST", f"/runs/{run_id}/transition", {"trigger": "complete"}, token)
    page.wait_for_selector('#live[data-live="finished"]')
    assert page.inner_text("#task-state") == "done"
    assert "finished (done)" in page.inner_text("#live-status")
    browser.no_script(page)
    assert not [line for line in browser.console if "Content Security Policy" in line]


#: A pipeline whose ``review`` stage waits for a person.
REVIEW_PIPELINE = {
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


def _at_review(browser: Browser, title: str) -> str:
    """A task its writer moved to the human step (through the served rail's API)."""
    pipelines = {p["name"]: p["id"] for p in browser.api("GET", "/pipelines")}
    pid = (
        pipelines.get("review")
        or browser.api("POST", "/pipelines", {"name": "review", "definition": REVIEW_PIPELINE})[
            "id"
        ]
    )
    task_id = str(browser.api("POST", "/tasks", {"pipeline_id": pid, "title": title})["id"])
    lease = browser.api("POST", "/leases/claim", {"agent_id": "w-1", "agent_role": "writer"})
    assert lease["task"]["id"] == task_id
    run, token = lease["run"]["id"], lease["lease_token"]
    browser.api("POST", f"/runs/{run}/transition", {"trigger": "submit"}, token)
    return task_id


@pytest.mark.timeout(120)
def test_a_human_step_is_approved_from_the_inbox_with_javascript_off(browser: Browser) -> None:
    _logged_in(browser)
    task_id = _at_review(browser, "draft to approve")
    browser.go("/ui/inbox")
    assert "draft to approve" in browser.page.inner_text("#inbox")
    browser.no_script()
    browser.shot("inbox")
    browser.page.click("#inbox a:text('draft to approve')")
    assert browser.page.url == f"{browser.url}/ui/tasks/{task_id}"
    browser.page.fill("#step-form textarea[name=instructions]", "ship it")
    browser.shot("task-step")
    browser.page.click("#step-approve")
    assert "to stage done" in browser.page.inner_text(".flash")
    assert browser.page.inner_text("#task-state") == "done"
    assert browser.task(task_id).stage == "done"
    browser.no_script()


@pytest.mark.timeout(120)
def test_search_and_filters_find_tasks_with_javascript_off(browser: Browser) -> None:
    _logged_in(browser)
    browser.go("/ui/tasks")
    browser.page.fill("#filters input[name=q]", "permanent_failure")
    browser.page.check("#filters input[name=events]")
    browser.page.select_option("#filters select[name=role]", "coder")
    browser.page.click("#filters button")
    assert browser.page.locator("#tasks td.title").all_inner_texts() == ["to be dead"]
    assert "at most 2000 tasks" in browser.page.inner_text("#scanned")
    assert browser.page.input_value("#filters input[name=q]") == "permanent_failure"
    browser.no_script()
    browser.shot("search")
    browser.page.fill("#filters input[name=q]", SCRIPT_TITLE)
    browser.page.uncheck("#filters input[name=events]")
    browser.page.click("#filters button")
    assert browser.page.locator("#tasks td.title").all_inner_texts() == [SCRIPT_TITLE]
    browser.no_script()


@pytest.mark.timeout(120)
def test_pipelines_and_a_task_s_relations_are_drawn_with_javascript_off(
    browser: Browser,
) -> None:
    _logged_in(browser)
    parent = browser.api("POST", "/tasks", {"pipeline_id": browser.ids.pipeline, "title": "plan"})
    for title in ("part one", "part two"):
        body = {"pipeline_id": browser.ids.pipeline, "title": title, "parent_id": parent["id"]}
        browser.api("POST", "/tasks", body)
    browser.go("/ui/pipelines")
    todo = browser.page.locator('svg.graph g.node[data-name="todo"]').first
    assert "role coder" in (todo.text_content() or "")
    assert browser.page.locator("svg.graph .edge").count() >= 3
    browser.no_script()
    browser.shot("pipelines")
    todo.click()  # a stage's box opens its tasks
    assert "stage=todo" in browser.page.url
    browser.go(f"/ui/tasks/{parent['id']}")
    boxes = browser.page.locator("#relations g.node")
    texts = [boxes.nth(i).get_attribute("data-name") for i in range(boxes.count())]
    assert sorted(texts) == ["part one", "part two", "plan"]
    browser.no_script()
    browser.shot("task-relations")


@pytest.mark.timeout(120)
def test_the_charts_draw_the_rail_over_time_with_javascript_off(browser: Browser) -> None:
    _logged_in(browser)
    browser.go("/ui/charts")
    assert "at most 500 tasks" in browser.page.inner_text("#sample")
    for chart in ("throughput", "pickup", "failures", "dead"):
        assert browser.page.locator(f"svg#chart-{chart}").count() == 1
    assert browser.page.locator("svg#chart-failures rect").count() >= 1
    browser.no_script()
    browser.shot("charts")
    browser.page.select_option("#window-form select[name=window]", "7d")
    browser.page.click("#window-form button")
    assert browser.page.url.endswith("/ui/charts?window=7d")
    assert "last 7d" in browser.page.inner_text("#sample")


@pytest.mark.timeout(120)
def test_bulk_cancel_then_requeue_with_a_preview_with_javascript_off(browser: Browser) -> None:
    _logged_in(browser)
    definition = {
        "initial": "queued",
        "states": {"queued": {"agent_role": "bulker"}, "done": {"terminal": True}},
        "transitions": [{"from": "queued", "trigger": "complete", "to": "done"}],
    }
    pid = browser.api("POST", "/pipelines", {"name": "bulk", "definition": definition})["id"]
    made = [
        browser.api("POST", "/tasks", {"pipeline_id": pid, "title": f"bulk {i}"})["id"]
        for i in range(3)
    ]
    browser.go("/ui/bulk")
    browser.page.select_option("#bulk-form select[name=action]", "cancel")
    browser.page.select_option("#bulk-form select[name=role]", "bulker")
    browser.page.click("#preview-button")
    assert "3 open tasks would be cancelled." in browser.page.inner_text("#preview-count")
    assert all(browser.task(t).dead_letter_reason is None for t in made)  # a preview writes none
    browser.no_script()
    browser.shot("bulk-preview")
    browser.page.click("#confirm")
    assert "Cancelled 3 tasks." in browser.page.inner_text(".flash")
    assert all(browser.task(t).dead_letter_reason == "cancelled" for t in made)
    browser.go("/ui/bulk?action=requeue&pipeline=bulk")
    assert "3 dead-lettered tasks would be requeued" in browser.page.inner_text("#preview-count")
    browser.page.click("#confirm")
    assert "Requeued 3 tasks." in browser.page.inner_text(".flash")
    assert all(browser.task(t).dead_letter_reason is None for t in made)
    browser.no_script()


#: work -> review -> done; review may reject back to work; no re-entry allowed.
LOOP_PIPELINE = {
    "initial": "work",
    "states": {
        "work": {"agent_role": "looper"},
        "review": {"agent_role": "critic"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "work", "trigger": "submit", "to": "review"},
        {"from": "review", "trigger": "reject", "to": "work"},
        {"from": "review", "trigger": "approve", "to": "done"},
    ],
    "budgets": {"max_loops": 0, "max_cost": 1.0},
}


@pytest.mark.timeout(120)
def test_the_task_page_shows_budgets_and_the_figures_that_stopped_it(browser: Browser) -> None:
    """docs/operate/budgets.md: spend against each cap, and why a task was stopped."""
    pid = browser.api("POST", "/pipelines", {"name": "loop", "definition": LOOP_PIPELINE})["id"]
    task_id = browser.api("POST", "/tasks", {"pipeline_id": pid, "title": "loop once"})["id"]
    for role, trigger, usd in (("looper", "submit", 0.25), ("critic", "reject", 0.1)):
        lease = browser.api("POST", "/leases/claim", {"agent_id": "a-1", "agent_role": role})
        assert lease["task"]["id"] == task_id
        body = {"trigger": trigger, "usage": {"cost": {"usd": usd, "tokens": 100}}}
        browser.api("POST", f"/runs/{lease['run']['id']}/transition", body, lease["lease_token"])
    assert browser.task(task_id).dead_letter_reason == "budget_exceeded"

    assert browser.go(f"/ui/tasks/{task_id}").status == 200
    assert browser.page.inner_text("#dead-reason") == "budget_exceeded"
    assert "loops 0 of 0 in stage work" in browser.page.inner_text("#dead-note")
    budget = browser.page.inner_text("#task-budget")
    assert "runs 2 (no cap)" in budget
    assert "cost 0.35 USD of 1.00 USD" in budget
    assert "tokens 200 (no cap)" in budget
    assert "exceeded loops 0 of 0 in stage work" in budget
    browser.no_script()
    browser.shot("task-budget")
