"""A unit that works where it is generated: an install under /tmp or /home, and the paths a
worker config names, against ProtectHome=, PrivateTmp= and ProtectSystem=strict."""

from __future__ import annotations

import os
import pwd
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.systemd.unitkit import install, needs_analyze, settings, verify
from worker.cli import main
from worker.cli.systemd.sandbox import (
    ConfiguredPath,
    UnitRefused,
    config_paths,
    install_paths,
    plan_placement,
    service_home,
)
from worker.cli.systemd.unit import UnitOptions, render_service, resolve_exec

# units render as for an install under /opt wherever this checkout is (conftest.py)
pytestmark = pytest.mark.usefixtures("stable_install")


def _fake_venv(root: Path) -> Path:
    """A virtualenv layout at ``root``: ``bin/python3`` (this interpreter) and the console
    script, as ``pip install`` would leave them."""
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    python = bindir / "python3"
    python.symlink_to(sys.executable)
    script = bindir / "backlog-worker"
    script.write_text(f"#!{python}\nfrom worker.cli import main\nmain()\n")
    script.chmod(0o755)
    return python


def _in_venv(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Make this process look like it runs from the virtualenv at ``root`` (input injection:
    ``systemd-unit`` reads sys.executable and sys.prefix)."""
    python = _fake_venv(root)
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setattr(sys, "prefix", str(root))


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, ["systemd-unit", *args], catch_exceptions=False)


# -- an install under /tmp ------------------------------------------------------------------------


def test_a_venv_under_tmp_is_refused_with_the_reason_and_the_override(monkeypatch):
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        venv = Path(scratch) / "venv"
        _in_venv(monkeypatch, venv)
        result = _run()
    assert result.exit_code == 2
    assert result.stdout == ""  # no half-right unit to redirect into /etc/systemd/system
    message = result.stderr
    assert message.startswith("error: ExecStart is ")  # as every command's refusal
    assert message.count("\n") == 1  # one line
    assert f"ExecStart is {venv}/bin/backlog-worker" in message
    assert "PrivateTmp=yes replaces with an empty directory" in message
    assert "does not outlive a reboot" in message
    assert "--allow-tmp" in message and "/opt/backlog-worker" in message


def test_allow_tmp_drops_private_tmp_and_moves_temporary_files_to_the_state_directory(
    monkeypatch,
):
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        venv = Path(scratch) / "venv"
        _in_venv(monkeypatch, venv)
        result = _run("--allow-tmp")
    assert result.exit_code == 0, result.output
    s = settings(result.stdout)
    assert s["PrivateTmp"] == ["no"]
    # ProtectSystem=strict leaves the host's /tmp read-only: the worker's default run
    # directories ($TMPDIR/backlog-worker) and executors' temporary files go here instead.
    assert "TMPDIR=%S/backlog-worker/tmp" in s["Environment"]
    assert s["StateDirectory"] == ["backlog-worker backlog-worker/tmp"]
    assert s["ProtectSystem"] == ["strict"]
    assert s["ExecStart"][0].startswith(f"{venv}/bin/backlog-worker run ")
    assert "PrivateTmp=no because ExecStart is" in result.stderr  # said, not only done
    assert "#   NOTE: PrivateTmp=no because" in result.stdout  # and kept in the unit


def test_a_rail_or_workdir_under_tmp_is_refused_too():
    paths = [ConfiguredPath("w.toml: tracker.url (the rail's directory)", "/var/tmp/r", True)]
    with pytest.raises(UnitRefused, match=r"tracker.url \(the rail's directory\) is /var/tmp/r"):
        plan_placement(paths, service_user="backlog-worker")
    allowed = plan_placement(paths, service_user="backlog-worker", allow_tmp=True)
    assert not allowed.private_tmp and allowed.read_write == ("/var/tmp/r",)


# -- an install under /home -----------------------------------------------------------------------


def test_a_venv_under_home_gets_protect_home_read_only_and_a_warning(monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/home/alice/venv")
    exec_start = ("/home/alice/venv/bin/backlog-worker",)
    opts = UnitOptions(exec_start=exec_start, paths=tuple(install_paths(exec_start)))
    s = settings(render_service(opts))
    assert s["ProtectHome"] == ["read-only"]
    assert s["PrivateTmp"] == ["yes"]  # nothing else is loosened
    assert s["ExecStart"][0].startswith("/home/alice/venv/bin/backlog-worker run ")
    [warning] = plan_placement(opts.paths, service_user="backlog-worker").warnings
    assert "ProtectHome=read-only instead of yes because ExecStart is /home/alice/venv" in warning
    assert "install under /opt" in warning


def test_a_home_directory_closed_to_the_service_user_is_named():
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch).chmod(0o755)  # open, like /home; alice's own directory is not
        home = Path(scratch) / "alice"
        (home / "venv" / "bin").mkdir(parents=True)
        home.chmod(0o700)
        paths = [ConfiguredPath("ExecStart", str(home / "venv" / "bin" / "backlog-worker"))]
        placement = plan_placement(paths, service_user="agents", allow_tmp=True)
    assert any(
        f"{home} (mode 0700) is closed to other users, and it holds ExecStart" in w
        and "unless User=agents may enter it" in w
        for w in placement.warnings
    ), placement.warnings


def test_the_cli_warns_on_stderr_and_keeps_stdout_a_unit(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/home/bob/.venv")
    result = _run()
    assert result.exit_code == 0, result.output
    assert "warning: ProtectHome=read-only instead of yes" in result.stderr
    assert "warning" not in result.stdout.replace("# ", "").split("[Unit]")[1]
    assert settings(result.stdout)["ProtectHome"] == ["read-only"]


# -- paths a worker config names ------------------------------------------------------------------


def _config(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def test_config_paths_become_read_write_paths(tmp_path):
    rail_dir = tmp_path / "rails"
    work = tmp_path / "work"
    rail_dir.mkdir()
    work.mkdir()
    config = _config(
        tmp_path / "coder.toml",
        f'[tracker]\nurl = "sqlite://{rail_dir}/rail.db"\napi_token_file = "api-token"\n'
        f'[worker]\nworkdir = "{work}"\n'
        '[[roles]]\nname = "coder"\nexecutor = "nullclaw"\n'
        '[roles.options]\nworkspace_dir = "/srv/agents/ws"\n'
        '[[roles]]\nname = "tester"\nexecutor = "command"\n'
        '[roles.options]\nargv = ["make", "test"]\ncwd = "/srv/repos/{task.id}"\n',
    )
    found = {p.label.split(": ", 1)[1]: p for p in config_paths(config)}
    assert found["tracker.url (the rail's directory)"].path == str(rail_dir)
    assert found["worker.workdir"].path == str(work)
    assert found["roles[coder].options.workspace_dir"].path == "/srv/agents/ws"
    assert found["roles[tester].options.cwd"].path == "/srv/repos"  # before the placeholder
    assert "tracker.api_token_file" not in found  # relative: the credentials directory
    placement = plan_placement(config_paths(config), service_user="backlog-worker", allow_tmp=True)
    assert placement.read_write == (str(rail_dir), str(work), "/srv/agents/ws", "/srv/repos")
    missing = [w for w in placement.warnings if "does not exist yet" in w]
    assert len(missing) == 2 and "226/NAMESPACE" in missing[0]


def test_paths_inside_the_state_directory_or_relative_need_nothing(tmp_path):
    config = _config(
        tmp_path / "w.toml",
        '[tracker]\nurl = "sqlite:///var/lib/backlog-worker/rail.db"\n[worker]\nworkdir = "runs"\n',
    )
    assert [p.path for p in config_paths(config)] == ["/var/lib/backlog-worker"]
    placement = plan_placement(config_paths(config), service_user="backlog-worker")
    assert placement.read_write == () and placement.warnings == ()
    remote = _config(tmp_path / "r.toml", '[tracker]\nurl = "https://rail.example.org"\n')
    assert config_paths(remote) == []


def test_the_cli_lists_config_paths_and_a_home_rail_loosens_protect_home(tmp_path):
    config = _config(
        tmp_path / "w.toml",
        '[tracker]\nurl = "sqlite:///home/alice/rails/rail.db"\n'
        'api_token_file = "/etc/backlog-worker/coder-token"\n'
        '[worker]\nworkdir = "/srv/agent-work"\n',
    )
    result = _run("--config", str(config))
    assert result.exit_code == 0, result.output
    s = settings(result.stdout)
    assert s["ReadWritePaths"] == ["/home/alice/rails", "/srv/agent-work"]
    assert s["ProtectHome"] == ["read-only"]
    assert "tracker.url (the rail's directory) is /home/alice/rails" in result.stderr
    assert "ReadWritePaths=/srv/agent-work" in result.stderr  # does not exist here


def test_the_cli_refuses_a_config_that_is_not_toml(tmp_path):
    bad = _config(tmp_path / "bad.toml", "[tracker\n")
    result = _run("--config", str(bad))
    assert result.exit_code == 2
    assert "bad.toml" in result.output and "--config" in result.output


@needs_analyze
def test_systemd_analyze_verifies_the_adjusted_units(tmp_path, monkeypatch):
    real = resolve_exec()
    work = tmp_path / "work dir"
    work.mkdir()
    variants = {
        "home.service": UnitOptions(
            exec_start=real,
            instance="home",
            paths=(ConfiguredPath("ExecStart", "/home/alice/venv/bin/backlog-worker"),),
        ),
        "tmp.service": UnitOptions(
            exec_start=real,
            instance="tmp",
            paths=(ConfiguredPath("worker.workdir", str(work), True),),
            allow_tmp=True,
        ),
        "mdwe.service": UnitOptions(
            exec_start=real, instance="mdwe", memory_deny_write_execute=True
        ),
    }
    install(tmp_path / "units", {name: render_service(o) for name, o in variants.items()})
    assert settings(render_service(variants["tmp.service"]))["ReadWritePaths"] == [f'"{work}"']
    for name in variants:
        assert verify(tmp_path / "units", name) == [], name


def test_a_directory_the_service_user_owns_is_not_reported_closed():
    me = pwd.getpwuid(os.getuid()).pw_name
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch).chmod(0o755)
        home = Path(scratch) / "mine"
        home.mkdir(mode=0o700)
        paths = [ConfiguredPath("ExecStart", str(home / "bin" / "backlog-worker"))]
        placement = plan_placement(paths, service_user=me, allow_tmp=True)
    assert not any("is closed" in w for w in placement.warnings), placement.warnings


def test_a_service_user_whose_home_protect_home_would_hide_gets_it_writable():
    # Tools executors run write their home (~/.cache, ~/.gitconfig): root's is /root.
    root_home = pwd.getpwnam("root").pw_dir
    if not root_home.startswith(("/root", "/home")):
        pytest.skip(f"root's home is {root_home} here")
    [home] = service_home("root")
    assert home.path == root_home and home.writable
    assert service_home("no-such-user-here") == []
    result = _run("--service-user", "root")
    assert result.exit_code == 0, result.output
    s = settings(result.stdout)
    assert s["ProtectHome"] == ["read-only"]
    assert root_home in s["ReadWritePaths"]
    assert "the home of User=root is" in result.stderr


def test_python_path_directories_are_read_by_the_service(tmp_path):
    config = _config(
        tmp_path / "w.toml",
        '[tracker]\nurl = "sqlite:///var/lib/backlog-worker/rail.db"\n'
        '[worker]\npython_path = ["/home/alice/jobs", "lib"]\n',
    )
    found = [(p.path, p.writable) for p in config_paths(config) if p.label.endswith("python_path")]
    # a relative entry is the config file's directory's, as the worker resolves it
    assert found == [("/home/alice/jobs", False), (str(tmp_path / "lib"), False)]

    home_only = _config(
        tmp_path / "h.toml",
        '[tracker]\nurl = "sqlite:///var/lib/backlog-worker/rail.db"\n'
        '[worker]\npython_path = ["/home/alice/jobs"]\n',
    )
    result = _run("--config", str(home_only))
    assert result.exit_code == 0, result.output
    s = settings(result.stdout)
    assert s["ProtectHome"] == ["read-only"]  # the jobs under /home stay importable
    assert "ReadWritePaths" not in s  # read, never written
    assert "worker.python_path is /home/alice/jobs" in result.stderr


def test_a_commands_artifacts_dir_is_written_by_the_service(tmp_path):
    config = _config(
        tmp_path / "w.toml",
        '[tracker]\nurl = "sqlite:///var/lib/backlog-worker/rail.db"\n'
        '[[roles]]\nname = "coder"\nexecutor = "command"\n'
        '[roles.options]\nargv = ["make"]\nartifacts_dir = "/srv/artifacts"\n',
    )
    found = {p.label.split(": ", 1)[1]: p for p in config_paths(config)}
    assert found["roles[coder].options.artifacts_dir"].path == "/srv/artifacts"
    assert found["roles[coder].options.artifacts_dir"].writable
