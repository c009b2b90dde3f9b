"""What a web page the operator opens may ask of the project's servers, against real processes on
127.0.0.1 (docs/operate/security.md): no cross-site write (a ``text/plain`` form, another
``Origin``), no DNS rebinding (a foreign ``Host``), on ``tracker serve`` (API, dashboard,
``/metrics``) and on ``dashboard --allow-actions``; plain clients keep working."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.dashboard.conftest import process, seed_file
from tests.worker.daemonkit import make_rail
from tracker_client.serve.browser import ALLOWED_HOSTS_ENV, HostRule, named_hosts

EVIL = "rebind.example.com"


def _tasks(http: httpx.Client) -> int:
    return len(http.get("/tasks").json()["items"])


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_tracker_serve_refuses_cross_site_writes_and_foreign_hosts(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    args = ["tracker", "serve", "--tracker", f"sqlite://{db}", "--port", "0"]
    args += ["--metrics-listen", "127.0.0.1:0", "--allowed-host", "rail.internal"]
    log = tmp_path / "serve.log"
    with process(args, log) as url, httpx.Client(base_url=url, timeout=10) as http:
        [pipeline] = http.get("/pipelines").json()
        body = f'{{"pipeline_id": "{pipeline["id"]}", "title": "from a web page"}}'
        # A cross-site HTML form can only send text/plain, urlencoded or multipart.
        form = http.post("/tasks", content=body, headers={"Content-Type": "text/plain"})
        assert form.status_code == 415, form.text
        assert form.json()["error"]["code"] == "unsupported_media_type"
        untyped = http.post("/ops/cancel-all", content=b"{}", headers={"Content-Type": ""})
        assert untyped.status_code == 415
        # A browser's fetch from another origin, even with the right type.
        json_type = {"Content-Type": "application/json"}
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Origin": "http://localhost:8000"},  # another local server's page
        ):
            refused = http.post("/tasks", content=body, headers={**json_type, **headers})
            assert refused.status_code == 403, (headers, refused.text)
            assert refused.json()["error"]["code"] == "cross_origin"
        cancel_all = http.post("/ops/cancel-all", headers={"Origin": "http://evil.example"})
        assert cancel_all.status_code == 403
        # DNS rebinding: the page's own name in Host, on reads too, and on the dashboard.
        for path in ("/tasks", "/health", "/ui/", "/ui/tasks"):
            rebound = http.get(path, headers={"Host": EVIL})
            assert rebound.status_code == 421, (path, rebound.text)
            assert "set-cookie" not in rebound.headers
        assert http.get("/tasks", headers={"Host": f"{EVIL}:7700"}).status_code == 421
        assert _tasks(http) == 0  # nothing of the above created a task
        # Plain clients, the server's own origin, loopback names and the names added work.
        assert http.post("/tasks", content=body, headers=json_type).status_code == 201
        port = url.rsplit(":", 1)[1]
        same = {**json_type, "Origin": url, "Sec-Fetch-Site": "same-origin"}
        assert http.post("/tasks", content=body, headers=same).status_code == 201
        for host in (f"localhost:{port}", "rail.internal", "127.0.0.1", "[::1]:1"):
            assert http.get("/health", headers={"Host": host}).status_code == 200, host
        assert http.post("/ops/maintenance").status_code == 200  # no body, no type: curl -X POST
        assert _tasks(http) == 2
        metrics = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", log.read_text())
        assert metrics
        assert httpx.get(metrics.group(1), headers={"Host": EVIL}).status_code == 421
        assert httpx.get(metrics.group(1)).status_code == 200


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_open_dashboard_with_actions_refuses_a_rebinding_host(tmp_path: Path) -> None:
    ids = seed_file(tmp_path / "rail.db")
    args = ["dashboard", "--tracker", f"sqlite:///{tmp_path / 'rail.db'}", "--port", "0"]
    with (
        process([*args, "--allow-actions"], tmp_path / "dash.log") as url,
        httpx.Client(base_url=url, timeout=10) as http,
    ):
        rebound = http.get(f"/ui/tasks/{ids.running}", headers={"Host": EVIL})
        assert rebound.status_code == 421
        assert "set-cookie" not in rebound.headers and "csrf" not in rebound.text
        page = http.get(f"/ui/tasks/{ids.running}")  # the operator's own browser
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert page.status_code == 200 and csrf
        forged = http.post(
            f"/ui/tasks/{ids.running}/cancel",
            data={"csrf": csrf.group(1)},
            headers={"Origin": "http://evil.example"},
        )
        assert forged.status_code == 403
        done = http.post(f"/ui/tasks/{ids.running}/cancel", data={"csrf": csrf.group(1)})
        assert done.status_code == 303


def test_host_rule_names() -> None:
    loop = HostRule.for_bind("127.0.0.1")
    assert loop.allows("localhost:7700") and loop.allows("127.0.0.1") and loop.allows(None)
    assert loop.allows("[::1]:7700") and loop.allows("app.localhost")
    assert not loop.allows("evil.example") and not loop.allows("localhost.evil.example")
    assert HostRule.for_bind("127.0.0.1", ["*"]).allows("anything.example")
    assert HostRule.for_bind("rail.lan").allows("RAIL.LAN.:7700")


def test_added_names_come_from_the_flag_and_the_environment() -> None:
    env = {ALLOWED_HOSTS_ENV: "scrape.example, rail.example"}
    assert named_hosts(["a.example,b.example"], env) == [
        "a.example",
        "b.example",
        "scrape.example",
        "rail.example",
    ]
    assert named_hosts([], {}) == []
