"""``backlog-tracker.service`` (``systemd-unit --tracker-serve``): the token by
``LoadCredential=``, a loopback default, and an ``ExecStart`` that really serves."""

from __future__ import annotations

import os
import shlex
import subprocess

import httpx
import pytest
from click.testing import CliRunner, Result

from tests.remote.fixtures import wait_listening
from tests.systemd.unitkit import install, needs_analyze, settings, verify
from tracker_client.embedded import EmbeddedTracker
from worker.cli import main
from worker.cli.systemd.serve import ServeOptions, is_loopback, render_tracker_service
from worker.cli.systemd.unit import resolve_exec

# units render as for an install under /opt wherever this checkout is (conftest.py)
pytestmark = pytest.mark.usefixtures("stable_install")

TOKEN = "serve-unit-token-0123456789"


def _run(*args: str) -> Result:
    return CliRunner().invoke(
        main, ["systemd-unit", "--tracker-serve", *args], catch_exceptions=False
    )


def test_the_serve_unit_takes_its_token_by_credential_and_binds_loopback():
    result = _run()
    assert result.exit_code == 0, result.output
    s = settings(result.stdout)
    [exec_start] = s["ExecStart"]
    argv = exec_start.split()
    assert argv[1:] == [
        "tracker", "serve", "--tracker", "sqlite:///var/lib/backlog-worker/rail.db",
        "--host", "127.0.0.1", "--port", "7700", "--token-file", "%d/api-token",
    ]  # fmt: skip
    assert s["LoadCredential"] == ["api-token:/etc/backlog-worker/api-token"]
    assert "SetCredential" not in s  # no blank fallback: a served rail always has a token
    assert TOKEN not in result.stdout and "--token " not in exec_start
    assert not any("TOKEN" in env for env in s.get("Environment", []))
    # the workers' user and state directory: the rail file is theirs
    assert s["User"] == s["Group"] == ["backlog-worker"]
    assert s["StateDirectory"] == ["backlog-worker"]
    assert s["WorkingDirectory"] == ["%S/backlog-worker"]
    assert s["IPAddressAllow"] == ["localhost"] and s["IPAddressDeny"] == ["any"]
    assert s["MemoryDenyWriteExecute"] == ["yes"]  # no executors here
    assert s["Type"] == ["exec"]
    assert s["WantedBy"] == ["multi-user.target"]


def test_a_non_loopback_address_is_rendered_with_a_warning():
    result = _run("--host", "0.0.0.0", "--port", "8443", "--config-dir", "/srv/bw")
    assert result.exit_code == 0, result.output
    s = settings(result.stdout)
    assert "--host 0.0.0.0 --port 8443" in s["ExecStart"][0]
    assert s["LoadCredential"] == ["api-token:/srv/bw/api-token"]
    assert "IPAddressDeny" not in s  # remote peers must reach it
    assert s["After"] == ["network-online.target"]
    assert "plain HTTP, so tokens cross the network in clear" in result.stderr
    assert "TLS reverse proxy" in result.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False),
     ("rail.example.org", False)],
)  # fmt: skip
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("rail", "message"),
    [
        ("https://rail.example.org", "is not an embedded rail"),
        ("sqlite:///./rail.db", "give the rail by absolute path"),
    ],
)
def test_the_serve_unit_refuses_a_rail_it_cannot_serve(rail, message):
    result = _run("--rail", rail)
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize("flag", [["--user"], ["--instance", "a"]])
def test_the_serve_unit_is_one_system_unit(flag):
    result = _run(*flag)
    assert result.exit_code == 2
    assert "--tracker-serve prints one system unit" in result.output


def test_a_rail_outside_the_state_directory_is_made_writable(tmp_path):
    result = _run("--rail", "sqlite:///srv/rails/main.db")
    assert result.exit_code == 0, result.output
    assert settings(result.stdout)["ReadWritePaths"] == ["/srv/rails"]
    assert "ReadWritePaths=/srv/rails (--rail (the rail's directory)) does not exist" in (
        result.stderr
    )


@pytest.mark.timeout(60)
@pytest.mark.anyio
async def test_the_rendered_exec_start_serves_with_the_credential(tmp_path):
    rail = tmp_path / "rail.db"
    await (await EmbeddedTracker.open(str(rail))).aclose()  # as after `pipeline create`
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    (creds / "api-token").write_text(TOKEN + "\n")
    unit = render_tracker_service(
        ServeOptions(exec_start=resolve_exec(), rail=f"sqlite://{rail}", port=0)
    )
    [exec_start] = settings(unit)["ExecStart"]
    # What systemd does: %d is $CREDENTIALS_DIRECTORY, the working directory is the state dir.
    argv = shlex.split(exec_start.replace("%d", str(creds)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["CREDENTIALS_DIRECTORY"] = str(creds)
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=tmp_path
        )
    try:
        url = wait_listening(log, proc)
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/health")).status_code == 200
            assert (await client.get("/pipelines")).status_code == 401
            auth = {"Authorization": f"Bearer {TOKEN}"}
            assert (await client.get("/pipelines", headers=auth)).status_code == 200
        assert TOKEN not in log.read_text()
        assert "without an api token" not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@needs_analyze
def test_systemd_analyze_verifies_the_serve_units(tmp_path):
    real = " ".join(resolve_exec())
    units = {
        "backlog-tracker.service": _run().stdout,
        "public-tracker.service": _run("--host", "0.0.0.0").stdout,
        "srv-tracker.service": _run(
            "--rail", f"sqlite://{tmp_path}/rails/r.db", "--allow-tmp"
        ).stdout,
    }
    (tmp_path / "rails").mkdir()
    assert all(real in text for text in units.values())
    install(tmp_path / "units", units)
    for name in units:
        assert verify(tmp_path / "units", name) == [], name
