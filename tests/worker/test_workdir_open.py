"""A configured ``[worker] workdir`` open to every user: refused without the sticky bit, warned
with it, at config load, at worker start, at a reload and in ``backlog-worker check``."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.worker.daemonkit import clean_env, make_rail, write_config
from tracker_client.errors import ConfigError
from worker.config.models import load_config
from worker.workdirs import check_workdir_base, open_workdir_problem, prepare_workdir_base


def _open_dir(path: Path, mode: int) -> Path:
    path.mkdir()
    path.chmod(mode)
    return path


def test_load_refuses_a_world_writable_workdir_naming_it_and_the_fix(tmp_path: Path) -> None:
    runs = _open_dir(tmp_path / "runs", 0o777)
    config = write_config(tmp_path, "sqlite:///x.db", token=None, argv=["true"], workdir=str(runs))
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    text = str(caught.value)
    assert str(runs) in text and "mode 0777" in text and f"chmod o-w {runs}" in text
    assert "workdir" in text and str(config) in text  # names the key and where it came from
    with pytest.raises(ConfigError, match="no sticky bit"):
        prepare_workdir_base(runs)  # a reload or an embedding caller is refused as well
    runs.chmod(0o755)
    assert load_config(config).worker.workdir == runs  # fixed: accepted


def test_a_sticky_world_writable_workdir_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runs = _open_dir(tmp_path / "shared", 0o1777)
    found = open_workdir_problem(runs)
    assert found is not None and found[0] == "warn" and "sticky" in found[1]
    with caplog.at_level(logging.WARNING, "backlog_worker.worker"):
        assert prepare_workdir_base(runs) == runs
    assert any(str(runs) in r.getMessage() for r in caplog.records)
    lines = check_workdir_base(runs)
    assert ("warn", f"run directory ([worker] workdir): {found[1]}") in lines


def test_check_fails_on_a_world_writable_workdir(tmp_path: Path) -> None:
    runs = _open_dir(tmp_path / "runs", 0o777)
    db = make_rail(tmp_path)
    config = write_config(tmp_path, f"sqlite://{db}", token=None, argv=["true"], workdir=str(runs))
    done = subprocess.run(
        [sys.executable, "-m", "worker", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert str(runs) in output and f"chmod o-w {runs}" in output
    [(level, _text)] = [line for line in check_workdir_base(runs) if str(runs) in line[1]]
    assert level == "fail"
