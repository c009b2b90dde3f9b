"""Only ``pipeline create`` starts a rail: every other command pointed at a missing or empty file
says ``no rail at PATH`` with exit 2 and leaves the path as it was.

Before, ``run``, ``check`` and ``tracker serve`` created a missing file, and every command turned
an empty file into a rail (keeping its 0644 mode).
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.cli.conftest import invoke

COMMANDS: dict[str, list[str]] = {
    "run": ["run", "--drain"],
    "check": ["check"],
    "serve": ["tracker", "serve", "--port", "0"],
    "task-list": ["task", "list"],
    "task-show": ["task", "show", "x"],
    "task-add": ["task", "add", "-p", "p", "title"],
    "task-cancel": ["task", "cancel", "x"],
    "task-requeue": ["task", "requeue", "x"],
    "task-cancel-all": ["task", "cancel-all", "--pipeline", "p", "--yes"],
    "submit": ["submit", "-p", "p", "title"],
    "pipeline-list": ["pipeline", "list"],
    "pipeline-show": ["pipeline", "show", "p"],
    "queue": ["queue"],
}


def _config(tmp_path: Path, db: Path) -> Path:
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[tracker]\nurl = "sqlite:///{db}"\n\n[[roles]]\nname = "coder"\nexecutor = "command"\n'
        '[roles.options]\nargv = ["/bin/true"]\n'
    )
    return config


@pytest.mark.parametrize("state", ["missing", "empty"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_rail_at_path(tmp_path: Path, command: str, state: str) -> None:
    db = tmp_path / "rail.db"
    if state == "empty":
        db.touch(mode=0o644)
    args = COMMANDS[command]
    if command in ("run", "check"):
        args = [*args, "--config", str(_config(tmp_path, db))]
    else:
        args = [*args, "--tracker", f"sqlite:///{db}"]
    result = invoke(args)
    assert result.exit_code == 2, result.output
    assert f"no rail at {db}" in result.stderr
    if state == "missing":
        assert not db.exists()
    else:
        assert db.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("rail")) == (
        [] if state == "missing" else ["rail.db"]
    )


def test_pipeline_create_starts_a_rail_even_on_an_empty_file_with_mode_0600(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    db.touch(mode=0o644)
    db.chmod(0o644)
    result = invoke(
        ["pipeline", "create", "p", "--state", "todo=coder", "--terminal", "done",
         "--transition", "todo:complete:done", "--tracker", f"sqlite:///{db}"]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert invoke(["task", "list", "--tracker", f"sqlite:///{db}"]).exit_code == 0
