"""The strict rules through the CLI: a typo'd pipeline key, non-object metadata and a requeue
into a terminal stage are refused with exit 2 and a line naming the rule."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import SIMPLE, Rail
from tracker_client.protocol import Tracker


def test_pipeline_create_refuses_a_typo_naming_it(rail: Rail, tmp_path: Path) -> None:
    definition = json.loads(json.dumps(SIMPLE))
    definition["states"]["todo"] = {"agent_rol": "coder"}
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({"name": "typo", "definition": definition}))
    result = rail.cli("pipeline", "create", "--file", str(path))
    assert result.exit_code == 2, result.output
    assert "unknown key 'agent_rol'" in result.stderr
    assert "did you mean 'agent_role'" in result.stderr
    assert rail.json("pipeline", "list") == []


def test_metadata_must_be_an_object(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", "-m", '["a", "list"]')
    assert result.exit_code == 2, result.output
    assert "metadata must be a JSON object" in result.stderr


def test_requeue_into_a_terminal_stage_is_refused(simple: Rail) -> None:
    task_id = simple.add("t", "--max-attempts", "0")

    async def fail_it(tracker: Tracker) -> None:
        lease = await tracker.claim("a", "coder", 60_000)
        assert lease is not None
        await tracker.fail(lease, "dead")

    simple.run(fail_it)
    result = simple.cli("task", "requeue", task_id, "--stage", "done")
    assert result.exit_code == 2, result.output
    assert "stage 'done' is terminal" in result.stderr
    assert simple.cli("task", "requeue", task_id, "--stage", "todo").exit_code == 0
