"""Strict input: a pipeline definition that would strand its tasks is refused naming the rule;
metadata is a JSON object; a requeue into a finished stage is refused.

Before, ``agent_rol``, a transition out of a terminal state and a role-less working state were
accepted, and tasks then waited forever.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.support import (
    BACKLOG_OPS,
    STRICT_DEFINITIONS,
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    simple_pipeline,
)
from tracker_client.errors import ValidationFailed
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker
from tracker_client.rules.pipelines import validate_definition

pytestmark = pytest.mark.anyio


def _with(path: str, value: Any) -> dict[str, Any]:
    definition = simple_pipeline()
    node: Any = definition
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(last) if isinstance(node, list) else last] = value
    return definition


def _terminal_way_out() -> dict[str, Any]:
    definition = simple_pipeline()
    definition["transitions"].append({"from": "done", "to": "todo", "trigger": "reopen"})
    return definition


CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "state-key-typo",
        _with("states.todo", {"agent_rol": "coder"}),
        ["state 'todo'", "unknown key 'agent_rol'", "did you mean 'agent_role'"],
    ),
    ("top-key-typo", _with("transition", []), ["unknown key 'transition'", "'transitions'"]),
    (
        "transition-key-typo",
        _with("transitions.0.trigerr", "x"),
        ["transition #1", "unknown key 'trigerr'", "'trigger'"],
    ),
    ("terminal-way-out", _terminal_way_out(), ["terminal state 'done'", "no way out"]),
    (
        "roleless-working-state",
        {
            **simple_pipeline(),
            "states": {**simple_pipeline()["states"], "limbo": {"description": "nobody"}},
            "transitions": [
                *simple_pipeline()["transitions"],
                {"from": "todo", "to": "limbo", "trigger": "park"},
                {"from": "limbo", "to": "done", "trigger": "finish"},
            ],
        },
        ["state 'limbo'", "not terminal", "no agent_role"],
    ),
]


@pytest.mark.requires(STRICT_DEFINITIONS)
@pytest.mark.parametrize(
    ("definition", "words"), [pytest.param(d, w, id=rule) for rule, d, w in CASES]
)
async def test_a_definition_that_strands_tasks_is_refused(
    tracker: Tracker, definition: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_pipeline("strict", definition)
    for word in words:
        assert word in str(err.value)
    assert await tracker.list_pipelines() == []


def test_every_known_key_is_accepted() -> None:
    definition = simple_pipeline(default_queue_ttl_ms=60_000, retry={"max_attempts": 2})
    definition["states"]["todo"].update(description="d", workflow_id="w", terminal=False)
    definition["transitions"][0].update(instructions="go", required_gates=["tests"])
    assert validate_definition(definition).retry == {"max_attempts": 2}


def test_stored_definitions_are_read_without_the_new_rules() -> None:
    # A rail made by an older version may hold one; it must still load (not break the rail).
    parsed = validate_definition(_terminal_way_out(), strict=False)
    assert parsed.is_terminal("done")


@pytest.mark.requires(BACKLOG_OPS, STRICT_DEFINITIONS)
async def test_requeue_into_a_terminal_stage_is_refused(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(max_attempts=0)))
    await tracker.fail(await claim(tracker), "dead")
    for stage in ("done", "failed"):
        with pytest.raises(ValidationFailed, match=f"stage '{stage}' is terminal"):
            await tracker.requeue(tid, stage=stage)
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason == "max_attempts_exceeded"  # untouched
    result = await tracker.requeue(tid, stage="todo")
    assert result.stage == "todo"
    assert [t.id for t in await all_tasks(tracker)] == [tid]
