"""``backlog-worker check`` warns about ``[roles.triggers]`` entries the rail's pipelines make
useless (a misspelled pipeline or stage) or wrong (a trigger the stage does not have)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from click.testing import CliRunner

from tracker_client.factory import open_tracker
from worker.cli import main

ARTICLE = {
    "initial": "draft",
    "states": {
        "draft": {"agent_role": "writer"},
        "edit": {"agent_role": "writer"},
        "proof": {"agent_role": "proofreader"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "draft", "to": "edit", "trigger": "submit"},
        {"from": "edit", "to": "proof", "trigger": "approve"},
        {"from": "edit", "to": "draft", "trigger": "reject"},
        {"from": "proof", "to": "done", "trigger": "complete"},
    ],
}


def test_check_warns_about_trigger_entries_that_cannot_apply(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/rail.db"

    async def seed() -> None:
        tracker = await open_tracker(url)
        try:
            await tracker.create_pipeline("article", ARTICLE)
        finally:
            await tracker.aclose()

    anyio.run(seed)
    config = tmp_path / "worker.toml"
    config.write_text(
        f"""
[[roles]]
name = "writer"
executor = "command"
[roles.options]
argv = [{json.dumps(sys.executable)}, "-c", "pass"]
[roles.triggers]
"article.edit" = "approve"   # fine
"artcle.edit" = "approve"    # a misspelled pipeline
"article.proof" = "complete" # another role's stage
"article" = "approve"        # draft has no 'approve'
"""
    )
    result = CliRunner().invoke(
        main, ["check", "--config", str(config), "--tracker", url, "--json"]
    )
    report = json.loads(result.stdout)
    warnings = [c["detail"] for c in report["checks"] if c["name"] == "triggers"]
    assert warnings == [
        "role writer: [roles.triggers] 'artcle.edit' names no stage of role writer in any pipeline",
        "role writer: [roles.triggers] 'article.proof' names no stage of role writer in any "
        "pipeline",
        "role writer: [roles.triggers] 'article' = 'approve': stage 'draft' of pipeline 'article' "
        "has no such trigger (it has: submit)",
    ]
    assert all(c["level"] == "warn" for c in report["checks"] if c["name"] == "triggers")
    assert report["ok"] is True and result.exit_code == 0  # a warning: pipelines may come later
