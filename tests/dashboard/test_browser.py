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
from dataclasses import dataclass
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

    def no_script(self) -> None:
        assert self.page.locator("script").count() == 0
        assert self.page.locator("[onerror], [onload], [onclick]").count() == 0
        assert self.dialogs == []


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
                yield Browser(url, ids, page, dialogs, artifacts_dir())
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
    assert browser.page.inner_text("#task-state") in ("waiting", "failed")
    browser.no_script()


def _logged_in(browser: Browser) -> None:
    browser.go("/ui/login")
    if browser.page.locator("#login").count():
        browser.page.fill("#login input[name=token]", TOKEN)
        browser.page.click("#login button")
    assert "/ui/login" not in browser.page.url
