"""A relative rail path is the working directory's, in a config file as on the command line, and
``no rail at`` says so: the path as written, the absolute path it became, the directory it was
resolved against, and the absolute form that names the same rail from anywhere.

(``[worker] python_path`` is the config file's directory's; the rail, ``workdir`` and a command's
relative program are the working directory's, so a config shared by shells started in one place
keeps naming one rail.) Real ``check`` processes, started from another directory than the rail's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import Rail


def _check(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", "check", *args],
        capture_output=True, text=True, timeout=50, cwd=cwd, env=env, check=False,
    )  # fmt: skip


def _config(path: Path, url: str) -> Path:
    path.write_text(
        f'[tracker]\nurl = "{url}"\n\n[[roles]]\nname = "coder"\nexecutor = "command"\n'
        f'options = {{ argv = ["{sys.executable}", "-c", "pass"] }}\n'
    )
    return path


def _refusal(rail: str, cwd: Path) -> str:
    return (
        f"error: no rail at {rail}, which is {cwd / Path(rail).name}: a relative rail path is the "
        f"working directory's ({cwd}), in a config file too; an absolute one "
        "(sqlite:///abs/path.db) names the same rail wherever the command starts; check the "
        "tracker url"
    )


def test_a_config_files_relative_rail_names_the_directory_it_resolved_against(
    simple: Rail, tmp_path: Path
) -> None:
    config = _config(simple.path.parent / "worker.toml", "sqlite:///./rail.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _check(elsewhere, "--config", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    assert _refusal("./rail.db", elsewhere) in done.stderr, done.stderr
    assert not (elsewhere / "rail.db").exists()  # nothing created where it looked

    # from the config's directory it is the same rail the file sits beside
    beside = _check(simple.path.parent, "--config", str(config))
    assert beside.returncode == 0, beside.stdout + beside.stderr


def test_a_relative_tracker_flag_says_the_same(simple: Rail, tmp_path: Path) -> None:
    config = _config(tmp_path / "worker.toml", simple.url)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _check(elsewhere, "--config", str(config), "--tracker", "sqlite://rail.db")
    assert done.returncode == 2, done.stdout + done.stderr
    assert _refusal("rail.db", elsewhere) in done.stderr, done.stderr


def test_an_absolute_missing_rail_is_named_as_before(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    config = _config(tmp_path / "worker.toml", f"sqlite://{missing}")
    done = _check(tmp_path, "--config", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: no rail at {missing}: check the tracker url" in done.stderr, done.stderr
