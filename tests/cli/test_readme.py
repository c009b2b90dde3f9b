"""The README run as written: its top commands on a fresh clone, and the quickstart page's tour
of the shipped examples (the quickstart and the operator tour: tests/docs/test_walkthroughs.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import invoke
from tests.docs.blocks import find, shell_commands

README = Path(__file__).resolve().parents[2] / "README.md"
QUICKSTART = "docs/getting-started/quickstart.md"


def fenced_sh_after(text: str, marker: str) -> str:
    """The one command in the first ``sh`` block after ``marker`` (the README's top commands)."""
    block = re.search(r"```sh\n(.*?)```", text.split(marker, 1)[1], re.S)
    assert block is not None, f"no sh block after {marker!r}"
    lines = [ln for ln in block.group(1).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    command = fenced_sh_after(README.read_text(encoding="utf-8"), "**Run the tests**")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert f"\n{command} || status=$?\n" in ci, command
    assert "venv" in command  # never into the system Python (externally managed on Debian)


def stock_python_path(bindir: Path) -> str:
    """A ``PATH`` whose ``python3`` is the distribution's own, as on a stock machine.

    Debian's and Ubuntu's ``/usr/bin/python3`` is externally managed: ``pip install`` into it
    is refused, which is what the README's commands must survive. Elsewhere the ``python3`` on
    ``PATH`` stands in for it.
    """
    path = os.environ.get("PATH", "")
    system = Path("/usr/bin/python3")
    if system.exists() and list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED")):
        bindir.mkdir()
        (bindir / "python3").symlink_to(system)
        path = f"{bindir}{os.pathsep}{path}"
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_readme_quick_start_runs_verbatim_on_a_fresh_clone(tmp_path: Path) -> None:
    """A fresh clone of HEAD, its README's "Try it" command run as written by ``sh``."""
    root = README.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(root), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    command = fenced_sh_after((clone / "README.md").read_text(encoding="utf-8"), "**Try it**")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BACKLOG_WORKER_", "PYTHON")) and k != "VIRTUAL_ENV"
    }
    env["PATH"] = stock_python_path(tmp_path / "bin")
    proc = subprocess.run(
        ["sh", "-c", command],
        cwd=clone,
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=560,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "demo summary" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert (clone / ".venv" / "bin" / "backlog-worker").exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_readme_examples_walkthrough_runs(tmp_path: Path) -> None:
    """The quickstart page's "shipped examples" commands, as real processes in a copy of the
    clone's root."""
    shutil.copytree(README.parent / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["BACKLOG_WORKER_WORKER__WORKDIR"] = str(tmp_path / "runs")
    commands = shell_commands(find(QUICKSTART, lang="sh", after="## The shipped examples").body)
    assert len(commands) >= 4
    for line in commands:
        args = shlex.split(line)
        assert args[0] == "backlog-worker", line
        proc = subprocess.run(
            [sys.executable, "-m", "worker", *args[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
    listed = invoke(["task", "list", "--all", "--json", "--tracker", "sqlite:///./rail.db"])
    stages = [t["stage"] for t in json.loads(listed.stdout)["items"]]
    assert stages == ["done"], listed.stdout
