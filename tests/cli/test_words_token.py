"""``--token``/``--token-file`` on the commands that take ``--tracker``, and a 401 that names the
token it refused (never printing it): against a real ``tracker serve --token-file`` process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import invoke
from tests.worker.daemonkit import TOKEN, clean_env, serve_tracker, write_config

WRONG = "not-the-token-4242"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real ``tracker serve`` requiring :data:`TOKEN`."""
    with serve_tracker(tmp_path_factory.mktemp("served")) as (url, _db):
        yield url


def _token_file(tmp_path: Path, token: str, name: str = "tok") -> Path:
    path = tmp_path / name
    path.write_text(token + "\n")
    return path


def _refused(args: list[str]) -> str:
    """Run a refused command; its one-line error (checked: exit 1, no token in it)."""
    result = invoke(args)
    assert result.exit_code == 1, result.output
    assert WRONG not in result.output and TOKEN not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_no_token_says_none_was_sent(served: str) -> None:
    line = _refused(["task", "list", "--tracker", served])
    assert "no token was sent (401)" in line
    assert "--token-file" in line


def test_env_token_is_named_by_its_variable(served: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", WRONG)
    line = _refused(["queue", "--tracker", served])
    assert "the tracker refused the api token from BACKLOG_WORKER_API_TOKEN (401)" in line


def test_token_file_flag_is_named_with_its_path(served: str, tmp_path: Path) -> None:
    path = _token_file(tmp_path, WRONG)
    line = _refused(["task", "list", "--tracker", served, "--token-file", str(path)])
    assert f"the tracker refused the api token read from {path} (--token-file) (401)" in line


def test_config_keys_are_named(served: str, tmp_path: Path) -> None:
    path = _token_file(tmp_path, WRONG)
    cfg = tmp_path / "ops.toml"
    cfg.write_text(f'[tracker]\nurl = "{served}"\napi_token_file = "{path}"\n')
    line = _refused(["pipeline", "list", "--config", str(cfg)])
    assert f"read from {path} ({cfg} [tracker] api_token_file) (401)" in line
    cfg.write_text(f'[tracker]\nurl = "{served}"\napi_token = "{WRONG}"\n')
    line = _refused(["pipeline", "list", "--config", str(cfg)])
    assert f"refused the api token from {cfg} [tracker] api_token (401)" in line


def test_token_file_flag_beats_the_environment(
    served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", WRONG)
    path = _token_file(tmp_path, TOKEN)
    result = invoke(["pipeline", "list", "--tracker", served, "--token-file", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert "flow" in result.stdout


def test_token_flag_works_and_warns_about_cmdline(served: str) -> None:
    result = invoke(["pipeline", "list", "--tracker", served, "--token", TOKEN, "--json"])
    assert result.exit_code == 0, result.output
    assert "flow" in result.stdout
    assert "/proc/PID/cmdline" in result.stderr and "--token-file" in result.stderr
    assert TOKEN not in result.stderr


def test_run_and_check_take_a_token_file(served: str, tmp_path: Path) -> None:
    """``check`` and ``run`` (real processes) read --token-file and name it when refused."""
    cfg = write_config(tmp_path, served, token=None, argv=[sys.executable, "-c", "pass"])
    good, bad = _token_file(tmp_path, TOKEN), _token_file(tmp_path, WRONG, "bad")
    cli = [sys.executable, "-m", "worker"]
    ok = subprocess.run(
        [*cli, "check", "--config", str(cfg), "--token-file", str(good)],
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "accepted the api token" in ok.stdout
    refused = subprocess.run(
        [*cli, "check", "--config", str(cfg), "--token-file", str(bad)],
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1
    assert f"refused the api token read from {bad} (--token-file) (401)" in refused.stdout
    run = subprocess.run(
        [*cli, "run", "--config", str(cfg), "--drain", "--token-file", str(bad)],
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert run.returncode != 0
    assert f"refused the api token read from {bad} (--token-file) (401)" in run.stderr
    for out in (ok, refused, run):
        assert TOKEN not in out.stdout + out.stderr and WRONG not in out.stdout + out.stderr
    assert os.environ.get("BACKLOG_WORKER_API_TOKEN") is None
