"""Bulk ``task add --from-file`` prints a count; the ids come with ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Rail


def test_bulk_add_prints_a_count_and_json_the_ids(simple: Rail, tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"title": f"t{i}"}) + "\n" for i in range(12)))
    result = simple.cli("task", "add", "-p", "simple", "--from-file", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout == "created 12 tasks (ids: --json)\n"

    created = simple.json("task", "add", "-p", "simple", "--from-file", str(path))
    assert len(created["ids"]) == len(set(created["ids"])) == 12
    listed = {t["id"] for t in simple.json("task", "list", "--all")["items"]}
    assert set(created["ids"]) <= listed and len(listed) == 24

    one = tmp_path / "one.jsonl"
    one.write_text('{"title": "alone"}\n')
    result = simple.cli("task", "add", "-p", "simple", "--from-file", str(one))
    assert result.stdout == "created 1 task (ids: --json)\n"
