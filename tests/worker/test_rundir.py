"""The run directory base: per user by default, refused when not ours, reported by ``check``.

The old default ``$TMPDIR/backlog-worker`` was shared by every user: another user's directory
there turned every run into a PermissionError. These tests run real worker processes as root
without CAP_DAC_OVERRIDE (dropped from the bounding set before exec), so another user's 0755
directory is as closed to them as it is to an ordinary user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nocaps import drop_dac_override
from tests.worker.daemonkit import add_task, clean_env, cli, make_rail, write_config
from tracker_client.errors import ConfigError
from worker.workdirs import default_workdir_base, prepare_workdir_base

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for os.chown")


def _worker_cli(*args: str, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env(TMPDIR=str(tmpdir))
    for var in ("STATE_DIRECTORY", "RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR"):
        env.pop(var, None)
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=drop_dac_override,
        timeout=60,
    )


def _foreign_dir(path: Path) -> Path:
    path.mkdir()
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o755)
    return path


def test_default_precedence(tmp_path: Path) -> None:
    uid = os.geteuid()
    env = {
        "STATE_DIRECTORY": "/var/lib/bw:/var/lib/bw/tmp",
        "RUNTIME_DIRECTORY": "/run/bw",
        "XDG_RUNTIME_DIR": "/run/user/1000",
        "TMPDIR": str(tmp_path),
    }
    assert default_workdir_base(env) == (Path("/var/lib/bw/runs"), "$STATE_DIRECTORY")
    del env["STATE_DIRECTORY"]
    assert default_workdir_base(env) == (Path("/run/bw/runs"), "$RUNTIME_DIRECTORY")
    del env["RUNTIME_DIRECTORY"]
    assert default_workdir_base(env) == (Path("/run/user/1000/backlog-worker"), "$XDG_RUNTIME_DIR")
    env["XDG_RUNTIME_DIR"] = "relative/ignored"
    assert default_workdir_base(env) == (tmp_path / f"backlog-worker-{uid}", "$TMPDIR")
    assert default_workdir_base({}) == (Path(f"/tmp/backlog-worker-{uid}"), "/tmp")


def test_default_is_made_private_and_a_loose_one_is_refused(tmp_path: Path) -> None:
    base = prepare_workdir_base(None, {"TMPDIR": str(tmp_path)})
    assert base == tmp_path / f"backlog-worker-{os.geteuid()}"
    assert base.stat().st_mode & 0o777 == 0o700
    base.chmod(0o777)
    with pytest.raises(ConfigError, match=r"writable by other users .*chmod 700"):
        prepare_workdir_base(None, {"TMPDIR": str(tmp_path)})
    configured = tmp_path / "mine"
    assert prepare_workdir_base(configured, {"TMPDIR": str(tmp_path)}) == configured


@needs_root
def test_another_users_dir_at_the_old_shared_path_does_not_break_runs(tmp_path: Path) -> None:
    _foreign_dir(tmp_path / "backlog-worker")  # the old shared default, another user's
    db = make_rail(tmp_path)
    task = add_task(db)
    # The command runs in the run's own directory (created under the base), writing a file.
    config = write_config(tmp_path, f"sqlite://{db}", token=None, argv=["touch", "made-here"])
    done = _worker_cli("run", "--config", str(config), "--max-tasks", "1", tmpdir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(cli(db, "task", "show", task))["task"]["stage"] == "done"
    mine = tmp_path / f"backlog-worker-{os.geteuid()}"
    assert mine.stat().st_mode & 0o777 == 0o700
    assert list(mine.iterdir()) == []  # the run's directory was removed after it


@needs_root
def test_run_refuses_a_default_base_owned_by_another_user(tmp_path: Path) -> None:
    theirs = _foreign_dir(tmp_path / f"backlog-worker-{os.geteuid()}")
    db = make_rail(tmp_path)
    config = write_config(tmp_path, f"sqlite://{db}", token=None, argv=["true"])
    done = _worker_cli("run", "--config", str(config), "--max-tasks", "1", tmpdir=tmp_path)
    assert done.returncode == 2, done.stderr
    assert str(theirs) in done.stderr and f"uid {NOBODY}" in done.stderr
    assert "[worker] workdir" in done.stderr


@needs_root
def test_check_reports_an_unwritable_configured_workdir(tmp_path: Path) -> None:
    locked = _foreign_dir(tmp_path / "locked")
    db = make_rail(tmp_path)
    config = write_config(
        tmp_path, f"sqlite://{db}", token=None, argv=["true"], workdir=str(locked / "runs")
    )
    done = _worker_cli("check", "--config", str(config), tmpdir=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAIL run directory {locked / 'runs'} ([worker] workdir) is not writable" in done.stdout
    config = write_config(tmp_path, f"sqlite://{db}", token=None, argv=["true"])
    done = _worker_cli("check", "--config", str(config), tmpdir=tmp_path)
    mine = tmp_path / f"backlog-worker-{os.geteuid()}"
    assert f"ok   run directory {mine} ($TMPDIR) is writable" in done.stdout, done.stdout
