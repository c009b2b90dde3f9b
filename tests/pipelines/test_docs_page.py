"""docs/operate/pipelines.md, run as written: its files written and its commands run in an
empty directory by real ``backlog-worker`` processes (:mod:`tests.docs.walkthrough`), and what
each prints checked against what the page says it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.docs.blocks import blocks
from tests.docs.walkthrough import Walkthrough

pytestmark = pytest.mark.timeout(180)

PAGE = "docs/operate/pipelines.md"
ME = "tests/pipelines/test_docs_page.py"


def test_the_page_procedure_runs_as_written(tmp_path: Path) -> None:
    diffs: list[str] = []

    def adapt(line: str) -> tuple[str, int]:
        if line.startswith("backlog-worker pipeline diff"):
            diffs.append(line)
            return line, 1 if len(diffs) == 2 else 0  # the rename without moves is refused
        return line, 0

    walk = Walkthrough(tmp_path, adapt=adapt)
    mine = [b for b in blocks(PAGE) if b.marker == "tested-by" and ME in b.marker_value]
    assert len(mine) == 6
    out = [proc for block in mine for proc in walk.block(block)]
    said = [p.stdout.strip() for p in out]
    assert "pipeline review created (version 1): stages draft, review, done" in said
    assert "pipeline review unchanged (version 1)" in said
    first_diff = next(p.stdout for p in out if "would change: version 1 -> 2" in p.stdout)
    assert "  + stage edit\n" in first_diff
    assert "  tasks: 2 to bring to version 2, 0 running" in first_diff
    refused = next(p for p in out if p.returncode == 1)
    assert "stage 'draft' holds 2 task(s) (2 unfinished, 0 running)" in refused.stderr
    assert 'moves = { draft = "<new stage>" }' in refused.stderr
    assert any("move draft -> write: 2 task(s) would move" in s for s in said)
    assert any(s.startswith("pipeline review applied: version 2 -> 3") for s in said)
    assert "pipeline review unchanged (version 3)" in said
    listed = walk.command(
        "backlog-worker task list -p review --stage write --json", mine[-1]
    ).stdout
    titles = sorted(t["title"] for t in json.loads(listed)["items"])
    assert titles == ["Fix the typo on the front page", "Write the release notes"]
