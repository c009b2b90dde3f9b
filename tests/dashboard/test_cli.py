"""``backlog-worker dashboard`` as a real process: over an embedded rail (read-only without a
token), over a served rail through its API (the token from a file, the login form), and its
bad options (exit 2, naming the option, nothing served)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from tests.dashboard.conftest import TOKEN, clean_env, process, seed_file
from tests.remote.fixtures import wait_listening
from tracker_client.dashboard.live import STREAM_S
from worker.cli import main


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_dashboard_of_an_embedded_rail_is_read_only_without_a_token(tmp_path: Path) -> None:
    ids = seed_file(tmp_path / "rail.db")
    args = ["dashboard", "--tracker", f"sqlite:///{tmp_path / 'rail.db'}", "--port", "0"]
    with process(args, tmp_path / "dashboard.log") as url, httpx.Client(base_url=url) as http:
        home = http.get("/")
        assert home.status_code == 303 and home.headers["location"] == "/ui/"
        tasks = http.get("/ui/tasks")
        assert tasks.status_code == 200
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in tasks.text
        page = http.get(f"/ui/tasks/{ids.running}").text
        assert "cancel-form" not in page and "Read-only" in page
        assert http.post(f"/ui/tasks/{ids.running}/cancel").status_code == 403
        assert http.get(f"/ui/tasks/{ids.running}").text.count("running") >= 1
    assert "open, read-only" in (tmp_path / "dashboard.log").read_text()


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("source", ["--token-file", "BACKLOG_WORKER_API_TOKEN"])
def test_the_dashboard_of_a_served_rail_logs_in_and_acts_through_the_api(
    tmp_path: Path, source: str
) -> None:
    ids = seed_file(tmp_path / "rail.db")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    serve = ["tracker", "serve", "--tracker", f"sqlite:///{tmp_path / 'rail.db'}", "--port", "0"]
    with process([*serve, "--token-file", str(token)], tmp_path / "serve.log") as rail:
        dash = ["dashboard", "--tracker", rail, "--port", "0"]
        env = {}
        if source == "--token-file":
            dash += ["--token-file", str(token)]
        else:
            env[source] = TOKEN
        with (
            process(dash, tmp_path / "dashboard.log", env) as url,
            httpx.Client(base_url=url) as http,
        ):
            assert http.get("/ui/").status_code == 303  # to the login form
            login = http.post("/ui/login", data={"token": TOKEN, "next": "/ui/tasks"})
            assert login.status_code == 303
            assert "&lt;script&gt;" in http.get("/ui/tasks").text
            page = http.get(f"/ui/tasks/{ids.running}").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', page)
            assert csrf
            done = http.post(f"/ui/tasks/{ids.running}/cancel", data={"csrf": csrf.group(1)})
            assert done.status_code == 303
            assert "Cancelled" in http.get(done.headers["location"]).text
        task = httpx.get(
            f"{rail}/tasks/{ids.running}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert task.json()["dead_letter_reason"] == "cancelled"
    log = (tmp_path / "dashboard.log").read_text()
    assert "login with the admin token" in log
    assert TOKEN not in log and TOKEN not in (tmp_path / "serve.log").read_text()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "70000"], "--port"),
        (["--refresh", "0"], "--refresh"),
        (["--tracker", "sqlite:///{tmp}/missing.db"], "no rail"),
        (["--log-level", "LOUD"], "--log-level"),
    ],
)
def test_bad_dashboard_options_exit_2_naming_the_problem(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--tracker" not in args:
        args += ["--tracker", f"sqlite:///{tmp_path}/missing.db"]
    result = CliRunner().invoke(main, ["dashboard", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert not (tmp_path / "missing.db").exists()  # no rail was created


def _stops_with_a_live_page_open(args: list[str], log: Path, task_id: str, auth: bool) -> float:
    """Start ``python -m worker ARGS``, open a task's live stream, stop the process (SIGTERM)
    once the stream has begun: the seconds the stop took."""
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=clean_env(),
        )
    try:
        url = wait_listening(log, proc)
        headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
        chunks: list[str] = []
        begun = threading.Event()

        def read() -> None:  # a browser reads its stream all along
            try:
                with httpx.stream(
                    "GET", f"{url}/ui/tasks/{task_id}/stream", headers=headers, timeout=60
                ) as stream:
                    for chunk in stream.iter_text():
                        chunks.append(chunk)
                        begun.set()
            except httpx.HTTPError:
                pass  # the server went away
            begun.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert begun.wait(20) and chunks and chunks[0].startswith("retry:"), chunks
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=40)
        took = time.monotonic() - started
        reader.join(20)
        return took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_open_live_page_does_not_hold_up_a_stop(tmp_path: Path) -> None:
    ids = seed_file(tmp_path / "rail.db")
    (tmp_path / "token").write_text(TOKEN + "\n")
    rail = f"sqlite:///{tmp_path / 'rail.db'}"
    serve = ["tracker", "serve", "--tracker", rail, "--port", "0"]
    serve += ["--token-file", str(tmp_path / "token")]
    took = _stops_with_a_live_page_open(serve, tmp_path / "serve.log", ids.running, True)
    assert took < STREAM_S / 2, took  # not the stream's whole 25 s
    alone = ["dashboard", "--tracker", rail, "--port", "0"]
    took = _stops_with_a_live_page_open(alone, tmp_path / "dash.log", ids.running, False)
    assert took < STREAM_S / 2, took
