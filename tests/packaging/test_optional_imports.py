"""The plain install (no extras) runs every command that does not use an extra.

The optional packages (psycopg and psycopg-pool of the ``postgres`` extra, OpenTelemetry of
``otel``) are made unimportable in a child process (:mod:`tests.packaging.without_extras`), as
if they were not installed: ``--help`` of every command in the click tree, bare
``backlog-worker``, ``--version``, ``demo``, ``check`` and ``rail copy`` between two SQLite
rails then exit 0 without a traceback and without even trying to import them; a
``postgresql://`` URL is a one-line configuration error (exit 2) naming the extra to install.
The same commands from a wheel in a venv without the extras: ``tests/packaging/test_wheel.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.worker.daemonkit import _pipeline, clean_env, make_rail
from tracker_client.errors import ConfigError
from tracker_client.extras import EXTRAS, missing, require

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).with_name("without_extras.py")
#: Every top-level package an extra brings.
OPTIONAL = sorted({module for modules in EXTRAS.values() for module in modules})
INSTALL_POSTGRES = "pip install 'backlog-worker[postgres]'"


def _without(
    tmp_path: Path, mode: str, *args: str, blocked: list[str] = OPTIONAL
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the child with ``blocked`` unimportable: (the process, the imports it tried)."""
    record = tmp_path / "tried.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), ",".join(blocked), str(record), mode, *args],
        capture_output=True,
        text=True,
        env=clean_env(COLUMNS="100"),
        cwd=tmp_path,
        timeout=100,
        check=False,
    )
    tried: list[str] = json.loads(record.read_text()) if record.exists() else []
    return proc, tried


def _ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_every_commands_help_runs_without_the_extras(tmp_path: Path) -> None:
    proc, tried = _without(tmp_path, "help-tree")
    _ok(proc)
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["failed"] == []
    assert report["commands"] >= 30  # the whole tree, subcommands of groups included
    assert tried == []


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], ["rail", "--help"], ["rail", "copy", "--help"]],
    ids=["help", "version", "rail-help", "rail-copy-help"],
)
def test_the_top_commands_run_without_the_extras(tmp_path: Path, args: list[str]) -> None:
    proc, tried = _without(tmp_path, "cli", *args)
    _ok(proc)
    assert proc.stdout.strip()
    assert tried == []


def test_bare_backlog_worker_prints_the_help_without_the_extras(tmp_path: Path) -> None:
    proc, tried = _without(tmp_path, "cli")
    assert proc.returncode == 2, proc.stderr  # no command: click's usage exit
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Usage: backlog-worker" in proc.stdout + proc.stderr
    assert "rail " in proc.stdout + proc.stderr
    assert tried == []


@pytest.mark.slow
def test_demo_check_and_a_sqlite_rail_copy_run_without_the_extras(tmp_path: Path) -> None:
    proc, tried = _without(tmp_path, "cli", "demo", "--tasks", "3", "--workers", "1", "--json")
    _ok(proc)
    assert json.loads(proc.stdout)["tasks"] == 3, proc.stdout
    assert tried == []

    db = make_rail(tmp_path)
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[tracker]\nurl = "sqlite://{db}"\n\n[[roles]]\nname = "coder"\nexecutor = "command"\n'
        f'[roles.options]\nargv = [{json.dumps(sys.executable)}, "-c", "pass"]\n'
    )
    proc, tried = _without(tmp_path, "cli", "check", "--config", str(config), "--json")
    assert json.loads(proc.stdout)["ok"] is True, proc.stdout + proc.stderr
    assert tried == []

    copy = tmp_path / "copy.db"
    proc, tried = _without(tmp_path, "cli", "rail", "copy", f"sqlite://{db}", f"sqlite://{copy}")
    _ok(proc)
    assert "counts verified" in proc.stdout
    assert tried == []


@pytest.mark.parametrize(
    "args",
    [
        ["queue", "--tracker", "postgresql://nobody@127.0.0.1:1/rail"],
        ["rail", "copy", "sqlite:///nowhere.db", "postgresql://nobody@127.0.0.1:1/rail"],
    ],
    ids=["queue", "rail-copy"],
)
def test_a_postgresql_url_without_the_extra_names_it(tmp_path: Path, args: list[str]) -> None:
    proc, tried = _without(tmp_path, "cli", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # a configuration error
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert line.count("\n") == 0, line
    assert INSTALL_POSTGRES in line and "'psycopg'" in line, line
    assert tried and tried[0] == "psycopg"


def test_a_missing_module_the_extra_does_not_bring_is_named_not_the_extra() -> None:
    # A dependency of the extra's packages is missing (sniffio was one, until anyio stopped
    # bringing it): the user has the extra, and installing it again would not help.
    with pytest.raises(ImportError) as info:
        __import__("backlog_worker_no_such_module")
    error = missing("postgres", "tracker url postgresql://", info.value)
    assert isinstance(error, ConfigError)
    assert "'backlog_worker_no_such_module' is missing" in str(error)
    assert "backlog-worker[postgres]" not in str(error)

    with pytest.raises(ImportError) as info:
        __import__("psycopg_pool.backlog_worker_no_such_module")
    error = missing("postgres", "tracker url postgresql://", info.value)
    assert INSTALL_POSTGRES in str(error)


def test_an_extra_too_old_to_import_a_name_says_upgrade() -> None:
    with pytest.raises(ImportError) as info:
        exec("from psycopg import backlog_worker_no_such_name", {})
    assert not isinstance(info.value, ModuleNotFoundError)  # psycopg is there, too old
    error = missing("postgres", "tracker url postgresql://", info.value)
    assert "pip install --upgrade 'backlog-worker[postgres]'" in str(error)


def test_require_passes_when_the_extra_is_installed() -> None:
    for extra in EXTRAS:
        require(extra, f"the {extra} extra")


@pytest.mark.slow
def test_the_postgresql_rail_needs_nothing_its_extra_does_not_declare(tmp_path: Path) -> None:
    # sniffio was imported by the PostgreSQL rail and declared by nothing (anyio 4.16 no longer
    # brings it): without it, a postgresql:// rail said "install the postgres extra".
    from tests.postgres.server import fresh_schema_url

    url = fresh_schema_url("packaging-undeclared")
    args = ["pipeline", "create", "-f", str(_pipeline(tmp_path)), "--tracker", url]
    proc, _ = _without(tmp_path, "cli", *args, blocked=["sniffio"])
    _ok(proc)
    proc, _ = _without(tmp_path, "cli", "queue", "--tracker", url, "--json", blocked=["sniffio"])
    _ok(proc)
    assert json.loads(proc.stdout)
