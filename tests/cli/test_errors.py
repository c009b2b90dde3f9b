"""Tracker and configuration failures common to every operator command: one line, exit code."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest

from tests.cli.conftest import Rail, invoke

COMMANDS = [
    ["pipeline", "list"],
    ["task", "list"],
    ["task", "show", "x"],
    ["queue"],
]


@pytest.mark.parametrize("args", COMMANDS)
def test_unknown_scheme_is_a_config_error(args: list[str]) -> None:
    result = invoke([*args, "--tracker", "ftp://example.invalid/x"])
    assert result.exit_code == 2
    assert "unknown scheme 'ftp'" in result.stderr


@pytest.mark.parametrize("args", COMMANDS)
def test_foreign_file_is_refused_untouched(args: list[str], tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all\n" * 100)
    before = path.read_bytes()
    result = invoke([*args, "--tracker", f"sqlite:///{path}"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert path.read_bytes() == before


def test_locked_database_is_unreachable(simple: Rail, tmp_path: Path) -> None:
    locked = Rail(simple.path, "?busy_timeout_ms=50")
    holder = sqlite3.connect(simple.path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        result = locked.cli("task", "add", "-p", "simple", "t")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 3
    assert "tracker unreachable" in result.stderr


def test_remote_tracker_unreachable() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    pytest.importorskip("tracker_client.nulltickets.client")
    result = invoke(["task", "list", "--tracker", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 3
    assert "tracker unreachable at http://127.0.0.1" in result.stderr


def test_config_file_supplies_the_tracker(simple: Rail, tmp_path: Path) -> None:
    simple.add("from config")
    config = tmp_path / "ops.toml"
    config.write_text(f'[tracker]\nurl = "{simple.url}"\n')
    result = invoke(["task", "list", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    assert "from config" in result.stdout


def test_environment_supplies_the_tracker(simple: Rail, monkeypatch: pytest.MonkeyPatch) -> None:
    simple.add("from env")
    monkeypatch.setenv("BACKLOG_WORKER_TRACKER_URL", simple.url)
    result = invoke(["task", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert "from env" in result.stdout


def test_default_tracker_is_backlog_db_in_the_working_directory(tmp_path: Path) -> None:
    result = invoke(["pipeline", "create", "p", "--state", "a=r", "--terminal", "b",
                     "--transition", "a:go:b"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "backlog.db").exists()
    assert invoke(["pipeline", "list", "--json"]).exit_code == 0


WRITES = [["task", "add", "-p", "p", "t"], ["task", "cancel", "x"]]


@pytest.mark.parametrize("args", [*COMMANDS, *WRITES])
def test_a_missing_rail_file_is_not_created(args: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    result = invoke([*args, "--tracker", f"sqlite:///{missing}"])
    assert result.exit_code == 2
    assert f"no rail at {missing}" in result.stderr
    assert not missing.exists()


def test_bad_config_file(tmp_path: Path) -> None:
    config = tmp_path / "ops.toml"
    config.write_text("[tracker]\nurl = 5\nbogus = 1\n")
    result = invoke(["task", "list", "--config", str(config)])
    assert result.exit_code == 2
    assert "tracker" in result.stderr
    assert str(config) in result.stderr
    result = invoke(["task", "list", "--config", str(tmp_path / "absent.toml")])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            '[[role]]\nname = "coder"\nexecutor = "python"\n',
            "role: unknown key (did you mean 'roles'?)",
        ),
        ("[wokrer]\nconcurrency = 2\n", "wokrer: unknown key (did you mean 'worker'?)"),
    ],
    ids=["role", "wokrer"],
)
def test_misspelt_worker_config_tables_are_named(tmp_path: Path, text: str, named: str) -> None:
    config = tmp_path / "worker.toml"
    config.write_text(text)
    result = invoke(["check", "--config", str(config)])
    assert result.exit_code == 2, result.output
    assert f"{config}: {named}" in result.stderr


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_first_run_without_a_config_says_what_is_missing(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``backlog-worker run`` alone: the message says no config was given at all, and what a
    worker's config needs, rather than only that no role is configured."""
    monkeypatch.delenv("BACKLOG_WORKER_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    result = invoke([command])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: no [[roles]] configured (no --config FILE given, nor $BACKLOG_WORKER_CONFIG): "
        "a worker needs at least one role (a [[roles]] table naming its executor: "
        "docs/getting-started/quickstart.md)\n"
    )
