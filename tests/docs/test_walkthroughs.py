"""The documentation's walkthroughs, run as written: real ``backlog-worker`` processes started by
``sh`` in an empty directory, one test per page (the blocks are read from the pages themselves,
see :mod:`tests.docs.walkthrough`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, Block, blocks, find
from tests.docs.walkthrough import Walkthrough

pytestmark = pytest.mark.timeout(180)

ME = "tests/docs/test_walkthroughs.py"


def mine(page: str) -> list[Block]:
    """The page's blocks that name this file as their test, in order."""
    found = [b for b in blocks(page) if b.marker == "tested-by" and ME in b.marker_value]
    assert found, f"{page}: no block is marked tested-by {ME}"
    return found


def test_readme_quickstart(tmp_path: Path) -> None:
    """README.md's quickstart (also docs/getting-started/quickstart.md): the reader's own
    pipeline, worker config and job, then create, add, run --drain, show."""
    walk = Walkthrough(tmp_path)
    results = [proc for block in mine("README.md") for proc in walk.block(block)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "jobs.py",
        "pipeline.toml",
        "rail.db",
        "worker.toml",
    ]
    create, _add, drain, show = results
    assert "created pipeline hello" in create.stdout
    assert "transitioned todo -> done (complete)" in drain.stderr
    assert "queue drained" in drain.stderr
    assert "1 transitioned, 0 failed" in drain.stderr
    assert "done" in show.stdout and "completed" in show.stdout
    assert "hello, world" in show.stdout  # the job's result event
    quickstart = find("README.md", lang="sh", after="## Your first pipeline")
    shown = walk.command("backlog-worker task show TASK_ID --json --config worker.toml", quickstart)
    assert json.loads(shown.stdout)["task"]["stage"] == "done"


def _tour_adapt(command: str) -> tuple[str, int]:
    """What the operating tour needs to run unattended: no worker ends a ``submit --wait``
    here (exit 5 when its timeout runs out), and a live ``--watch`` is asked for one refresh."""
    if command.startswith("backlog-worker submit") and "--wait" in command:
        return command.replace("--timeout 5s", "--timeout 200ms"), 5
    if "--watch" in command:
        return f"{command} --iterations 1", 0
    return command, 0


def test_operating_tour(tmp_path: Path) -> None:
    """The operator's pages: the command tour, replaying dead letters and retention, schedules
    and rate limits, the worker list; one rail, in the order a reader meets them."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # the tour names them
    walk = Walkthrough(tmp_path, adapt=_tour_adapt)
    pages = [
        "docs/operate/commands.md",
        "docs/operate/backups-retention.md",
        "docs/submit/producer.md",
        "docs/operate/several-workers.md",
    ]
    for page in pages:
        for block in mine(page):
            walk.block(block)
    assert len(walk.ran) >= 30, walk.ran
    assert (tmp_path / "rail.db").exists()
