"""The producer page's examples (docs/submit/producer.md), run verbatim as real processes against
a real rail file and the same file served on 127.0.0.1 (the code blocks are read from the page,
so it cannot drift from what works)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, find, shell_commands
from tests.docs.blocks import blocks as page_blocks
from tests.producer.conftest import TOKEN, count_tasks, make_rail, served

pytestmark = pytest.mark.timeout(120)


PAGE = "docs/submit/producer.md"


def blocks() -> dict[str, str]:
    """The page's python code blocks titled as files, by their title (the file name); an
    included file under examples/ (the web app) is not one: tests/test_examples.py serves it,
    nor is an untitled helper (tests/cli/test_python_jobs.py runs the results one)."""
    named = {
        b.title: b.body
        for b in page_blocks(PAGE)
        if b.lang == "python" and b.title and not b.snippet_paths
    }
    assert set(named) == {"app.py", "script.py"}, named.keys()
    return named


def run(code: str, tmp_path: Path, url: str, token: str | None) -> list[str]:
    """Run one block as a script in ``tmp_path``; its output lines (exit 0 expected)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["BACKLOG_WORKER_TRACKER_URL"] = url
    if token is not None:
        env["BACKLOG_WORKER_API_TOKEN"] = token
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("where", ["embedded", "served"])
def test_the_page_examples_run_verbatim(where: str, tmp_path: Path) -> None:
    path = make_rail(tmp_path / "rail.db")
    code = blocks()

    def both(url: str, token: str | None) -> None:
        draft, outcome, checks = run(code["app.py"], tmp_path, url, token)[0].split()
        assert (outcome, checks) == ("pending", "3")
        assert run(code["app.py"], tmp_path, url, token)[1] == "not needed after all"
        assert run(code["script.py"], tmp_path, url, token) == ["8 draft pending"]
        assert re.fullmatch(r"[0-9a-f-]{36}", draft)

    if where == "embedded":
        both(f"sqlite:///{path}", None)
    else:
        with served(path) as url:
            both(url, TOKEN)
    assert count_tasks(path) == 2 * 5 + 8


def test_the_default_url_is_the_rail_the_page_makes(tmp_path: Path) -> None:
    """The page's set-up command as written (from a copy of the clone's examples/), then
    script.py with no URL set: it finds the rail in the working directory."""
    (tmp_path / "examples").mkdir()
    shutil.copytree(ROOT / "examples" / "pipelines", tmp_path / "examples" / "pipelines")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for line in shell_commands(find(PAGE, lang="sh").body):
        made = subprocess.run(
            ["sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0, made.stderr
    done = subprocess.run(
        [sys.executable, "-c", blocks()["script.py"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert count_tasks(tmp_path / "rail.db") == 8
