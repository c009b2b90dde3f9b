"""docs/operate/security.md#scoped-tokens: the page's commands run as shown, on a real rail."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.worker.daemonkit import clean_env

pytestmark = pytest.mark.timeout(120)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operate" / "security.md"


def _shape(line: str) -> str:
    line = re.sub(r"tok_[0-9a-f]{8}", "ID", line)
    line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "WHEN", line)
    return re.sub(r"\s+", " ", line).strip()


def test_the_scoped_tokens_walkthrough_runs_as_shown(tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Scoped tokens") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    env = clean_env(BACKLOG_WORKER_TRACKER_URL=f"sqlite:///{tmp_path}/rail.db")
    listed = ""
    for line in lines:
        if not line.startswith("backlog-worker "):
            continue
        argv, _, target = line.partition(" > ")
        done = subprocess.run(
            [sys.executable, "-m", "worker", *shlex.split(argv)[1:]],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (line, done.stderr)
        if target:
            (tmp_path / target).write_text(done.stdout)
            assert done.stdout.startswith("bwt_")
        else:
            listed = done.stdout
    shown = [c[2:] for c in lines if c.startswith("# ")]
    assert [_shape(s) for s in shown] == [_shape(o) for o in listed.splitlines()]
    assert (tmp_path / "rail.db.tokens.json").stat().st_mode & 0o777 == 0o600
