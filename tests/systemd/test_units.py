"""The unit files: contrib copies match the renderer, ``systemd-analyze verify`` accepts them,
and ``backlog-worker systemd-unit`` prints units for this install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.systemd.unitkit import install, needs_analyze, settings, verify
from worker.cli import main
from worker.cli.systemd.sandbox import install_paths
from worker.cli.systemd.serve import ServeOptions, render_tracker_service
from worker.cli.systemd.unit import (
    CONTRIB_EXEC,
    UnitOptions,
    render_service,
    render_target,
    resolve_exec,
    stop_timeout_s,
)
from worker.config.models import WorkerConfig

# units render as for an install under /opt wherever this checkout is (conftest.py)
pytestmark = pytest.mark.usefixtures("stable_install")

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "systemd"
_settings = settings
_verify = verify
_install = install


# -- contrib/systemd -------------------------------------------------------------------------------


def test_contrib_units_are_what_the_command_renders():
    # One source of truth: regenerate with
    #   python -c 'from worker.cli.systemd.unit import *; print(render_service(), end="")'
    # (backlog-tracker.service: render_tracker_service(ServeOptions(exec_start=CONTRIB_EXEC)))
    assert (CONTRIB / "backlog-worker@.service").read_text() == render_service()
    assert (CONTRIB / "backlog-worker.target").read_text() == render_target()
    assert (CONTRIB / "backlog-tracker.service").read_text() == render_tracker_service(
        ServeOptions(exec_start=CONTRIB_EXEC)
    )


def test_template_has_the_supervision_settings():
    s = _settings((CONTRIB / "backlog-worker@.service").read_text())
    assert s["Type"] == ["notify"]
    assert s["NotifyAccess"] == ["main"]
    assert s["WatchdogSec"] == ["30"]
    assert s["Restart"] == ["on-failure"]
    assert s["KillMode"] == ["mixed"]
    assert s["KillSignal"] == ["SIGTERM"]
    assert s["ExecStart"] == [
        "/usr/local/bin/backlog-worker run --config /etc/backlog-worker/%i.toml"
    ]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["StateDirectory"] == ["backlog-worker"]
    assert s["LoadCredential"] == ["api-token:/etc/backlog-worker/api-token"]
    assert s["User"] == s["Group"] == ["backlog-worker"]
    assert "DynamicUser" not in s  # instances share the state directory
    assert "BACKLOG_WORKER_INSTANCE=%i" in s["Environment"]
    for hardening in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert s[hardening] == ["yes"]
    assert s["ProtectSystem"] == ["strict"]
    assert s["PartOf"] == ["backlog-worker.target"]
    assert s["WantedBy"] == ["multi-user.target backlog-worker.target"]


def test_stop_timeout_outlasts_the_default_shutdown_grace():
    grace = WorkerConfig.model_fields["shutdown_grace_s"].default
    assert isinstance(grace, float)
    [timeout] = _settings((CONTRIB / "backlog-worker@.service").read_text())["TimeoutStopSec"]
    assert int(timeout) == stop_timeout_s(grace) > grace


@needs_analyze
def test_systemd_analyze_verifies_the_contrib_units(tmp_path):
    # The contrib ExecStart names /usr/local/bin/backlog-worker; verify checks that it exists,
    # so point it at this install's real entry point.
    real = " ".join(resolve_exec())
    template = (CONTRIB / "backlog-worker@.service").read_text()
    assert CONTRIB_EXEC[0] in template
    _install(
        tmp_path,
        {
            "backlog-worker@.service": template.replace(CONTRIB_EXEC[0], real),
            "backlog-worker.target": (CONTRIB / "backlog-worker.target").read_text(),
            "backlog-tracker.service": (CONTRIB / "backlog-tracker.service")
            .read_text()
            .replace(CONTRIB_EXEC[0], real),
        },
    )
    assert _verify(tmp_path, "backlog-worker@1.service", "backlog-worker.target") == []
    assert _verify(tmp_path, "backlog-tracker.service") == []
    assert _verify(tmp_path, "backlog-worker@alpha-2.service") == []


@needs_analyze
def test_the_verify_check_does_catch_mistakes(tmp_path):
    broken = render_service(UnitOptions(exec_start=resolve_exec())).replace(
        "KillMode=mixed", "KillMode=mixed\nWatchDogSec=30"
    )
    _install(tmp_path, {"backlog-worker@.service": broken, "backlog-worker.target": ""})
    complaints = _verify(tmp_path, "backlog-worker@1.service")
    assert any("WatchDogSec" in line for line in complaints)
    missing = render_service(UnitOptions(exec_start=(str(tmp_path / "no-such-binary"),)))
    _install(tmp_path / "m", {"backlog-worker@.service": missing})
    assert any(
        "no-such-binary" in line for line in _verify(tmp_path / "m", "backlog-worker@1.service")
    )


# -- backlog-worker systemd-unit -------------------------------------------------------------------


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, ["systemd-unit", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout  # warnings (an install under /root, say) go to stderr


def test_command_prints_the_template_for_this_install():
    text = _cli()
    s = _settings(text)
    exec_path = resolve_exec()[0]
    assert Path(exec_path).is_absolute() and os.access(exec_path, os.X_OK)
    assert s["ExecStart"] == [
        " ".join(resolve_exec()) + " run --config /etc/backlog-worker/%i.toml"
    ]
    opts = UnitOptions(exec_start=resolve_exec(), paths=tuple(install_paths(resolve_exec())))
    assert text == render_service(opts)


def test_command_options_change_the_unit():
    s = _settings(_cli("--config-dir", "/srv/bw conf/", "--shutdown-grace-s", "120",
                       "--watchdog-s", "10", "--service-user", "agents"))  # fmt: skip
    assert s["ExecStart"][0].endswith(' run --config "/srv/bw conf/%i.toml"')
    assert s["LoadCredential"] == ["api-token:/srv/bw conf/api-token"]
    assert s["TimeoutStopSec"] == ["150"]
    assert s["WatchdogSec"] == ["10"]
    assert s["User"] == s["Group"] == ["agents"]


def test_command_escapes_percent_and_dollar_in_paths():
    text = render_service(UnitOptions(exec_start=("/opt/50%off/$bin/backlog-worker",)))
    assert _settings(text)["ExecStart"][0].startswith('"/opt/50%%off/$$bin/backlog-worker" run')


def test_command_instance_prints_a_concrete_unit():
    s = _settings(_cli("--instance", "coder-1"))
    assert s["ExecStart"][0].endswith(" run --config /etc/backlog-worker/coder-1.toml")
    assert "BACKLOG_WORKER_INSTANCE=coder-1" in s["Environment"]
    assert s["WantedBy"] == ["multi-user.target"]
    assert "PartOf" not in s


def test_command_user_mode():
    s = _settings(_cli("--user"))
    assert "User" not in s and "ProtectSystem" not in s
    assert s["ExecStart"][0].endswith(" run --config %E/backlog-worker/%i.toml")
    assert s["NoNewPrivileges"] == ["yes"]
    assert s["WantedBy"] == ["default.target backlog-worker.target"]


def test_command_target():
    assert _cli("--target") == render_target()
    assert "WantedBy=default.target" in _cli("--target", "--user")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--instance", "a b"], "instance name 'a b': use letters, digits"),
        (["--config-dir", "etc/bw"], "'etc/bw' is not an absolute path"),
        (["--service-user", "1 user"], "'1 user' is not a user name"),
        (["--shutdown-grace-s", "-1"], "--shutdown-grace-s"),
    ],
)
def test_command_refuses_bad_options_by_name(args, message):
    result = CliRunner().invoke(main, ["systemd-unit", *args])
    assert result.exit_code == 2
    assert message in result.output


@needs_analyze
def test_systemd_analyze_verifies_what_the_command_prints(tmp_path):
    _install(
        tmp_path / "system",
        {
            "backlog-worker@.service": _cli(),
            "backlog-worker.target": _cli("--target"),
            "backlog-worker-coder.service": _cli("--instance", "coder", "--config-dir", "/srv/a b"),
        },
    )
    assert _verify(tmp_path / "system", "backlog-worker@3.service", "backlog-worker.target") == []
    assert _verify(tmp_path / "system", "backlog-worker-coder.service") == []
    _install(
        tmp_path / "user",
        {
            "backlog-worker@.service": _cli("--user"),
            "backlog-worker.target": _cli("--target", "--user"),
        },
    )
    assert (
        _verify(tmp_path / "user", "backlog-worker@1.service", "backlog-worker.target", user=True)
        == []
    )


def test_without_a_console_script_the_unit_runs_python_dash_m_worker(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    python = bindir / "python3"
    python.symlink_to(sys.executable)  # a venv's python is a symlink: keep it, don't resolve
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setenv("PATH", str(bindir))
    assert resolve_exec() == (str(python), "-m", "worker")
    proc = subprocess.run(
        [*resolve_exec(), "systemd-unit", "--target"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout == render_target()
