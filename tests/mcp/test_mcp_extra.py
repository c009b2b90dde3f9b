"""The plain install (no ``mcp`` extra): ``backlog-worker mcp --help`` works, running it names
the extra to install (exit 2), and no other command imports the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.worker.daemonkit import clean_env, make_rail

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).parents[1] / "packaging" / "without_extras.py"


def _without_mcp(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    record = tmp_path / "tried.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "mcp", str(record), "cli", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=clean_env(COLUMNS="100"),
        cwd=tmp_path,
        timeout=100,
        check=False,
    )
    tried: list[str] = json.loads(record.read_text()) if record.exists() else []
    return proc, tried


def test_mcp_help_runs_without_the_extra(tmp_path: Path) -> None:
    proc, tried = _without_mcp(tmp_path, "mcp", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # as wrapped to the terminal's width
    assert "--http HOST:PORT" in text and "pip install 'backlog-worker[mcp]'" in text
    assert tried == []


def test_running_mcp_without_the_extra_names_it(tmp_path: Path) -> None:
    db = make_rail(tmp_path)
    proc, tried = _without_mcp(tmp_path, "mcp", "--tracker", f"sqlite://{db}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert line.count("\n") == 0, line
    assert "backlog-worker mcp needs the mcp extra" in line, line
    assert "pip install 'backlog-worker[mcp]'" in line, line
    assert tried and tried[0] == "mcp"
    assert proc.stdout == ""
