"""Bad input: every pipeline validation rule, and bad task/event fields. Nothing is written."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.contract.support import (
    EXTENSIONS,
    STRICT_LIMITS,
    WAIT,
    all_tasks,
    claim,
    make_pipeline,
    new_task,
    run_events,
    simple_pipeline,
)
from tracker_client.errors import Conflict, NotFound, ValidationFailed
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
_EXT = pytest.mark.requires(EXTENSIONS)


def _base() -> dict[str, Any]:
    return {
        "initial": "todo",
        "states": {
            "todo": {"agent_role": "coder"},
            "review": {"agent_role": "reviewer"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "todo", "to": "review", "trigger": "complete"},
            {"from": "review", "to": "done", "trigger": "approve"},
            {"from": "review", "to": "todo", "trigger": "reject"},
        ],
    }


def _broken(path: str, value: Any) -> dict[str, Any]:
    """The base definition with ``value`` at ``path`` (dotted; a missing value deletes it)."""
    definition = copy.deepcopy(_base())
    node: Any = definition
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is _DELETE:
        del node[key]
    elif isinstance(node, list) and key == len(node):
        node.append(value)
    else:
        node[key] = value
    return definition


_DELETE = object()


def _no_terminal() -> dict[str, Any]:
    definition = _broken("states.done.terminal", False)
    definition["transitions"].append({"from": "done", "to": "todo", "trigger": "reopen"})
    return definition


#: (rule id, definition, words the message must contain)
PIPELINE_CASES: list[tuple[str, Any, list[str]]] = [
    ("definition-not-object", ["todo"], ["object"]),
    ("initial-missing", _broken("initial", _DELETE), ["initial"]),
    ("initial-empty", _broken("initial", ""), ["initial"]),
    ("initial-not-string", _broken("initial", 3), ["initial"]),
    ("initial-unknown", _broken("initial", "start"), ["initial", "start"]),
    ("states-missing", _broken("states", _DELETE), ["states"]),
    ("states-empty", _broken("states", {}), ["states"]),
    ("states-not-object", _broken("states", ["todo"]), ["states"]),
    ("state-not-object", _broken("states.review", "reviewer"), ["review"]),
    ("agent-role-not-string", _broken("states.todo.agent_role", 7), ["todo", "agent_role"]),
    ("terminal-not-bool", _broken("states.done.terminal", "yes"), ["done", "terminal"]),
    ("description-not-string", _broken("states.todo.description", 1), ["todo", "description"]),
    ("transitions-missing", _broken("transitions", _DELETE), ["transitions"]),
    ("transitions-empty", _broken("transitions", []), ["transitions"]),
    ("transitions-not-list", _broken("transitions", {"a": 1}), ["transitions"]),
    ("transition-not-object", _broken("transitions.1", "review->done"), ["transition"]),
    ("from-missing", _broken("transitions.1.from", _DELETE), ["transition", "from"]),
    ("from-empty", _broken("transitions.1.from", ""), ["transition", "from"]),
    ("to-not-string", _broken("transitions.1.to", 5), ["transition", "to"]),
    ("trigger-missing", _broken("transitions.1.trigger", _DELETE), ["transition", "trigger"]),
    ("trigger-empty", _broken("transitions.1.trigger", ""), ["transition", "trigger"]),
    ("from-unknown", _broken("transitions.1.from", "revue"), ["transition", "revue"]),
    ("to-unknown", _broken("transitions.1.to", "donee"), ["transition", "donee"]),
    ("no-terminal", _no_terminal(), ["terminal"]),
    (
        "dead-end-state",
        _broken("states.limbo", {"agent_role": "nobody"}),
        ["limbo", "transition"],
    ),
    (
        "duplicate-from-trigger",
        _broken("transitions.3", {"from": "todo", "to": "done", "trigger": "complete"}),
        ["duplicate", "todo", "complete"],
    ),
    (
        "instructions-not-string",
        _broken("transitions.0.instructions", ["x"]),
        ["instructions"],
    ),
    (
        "gates-not-list",
        _broken("transitions.0.required_gates", "tests"),
        ["required_gates"],
    ),
    (
        "gates-not-strings",
        _broken("transitions.0.required_gates", ["tests", 3]),
        ["required_gates"],
    ),
    ("queue-ttl-zero", _broken("default_queue_ttl_ms", 0), ["default_queue_ttl_ms"]),
    ("queue-ttl-negative", _broken("default_queue_ttl_ms", -5), ["default_queue_ttl_ms"]),
    ("queue-ttl-not-int", _broken("default_queue_ttl_ms", "1h"), ["default_queue_ttl_ms"]),
    ("queue-ttl-bool", _broken("default_queue_ttl_ms", True), ["default_queue_ttl_ms"]),
]


@pytest.mark.parametrize(
    ("definition", "words"),
    [pytest.param(d, w, id=rule) for rule, d, w in PIPELINE_CASES],
)
async def test_pipeline_rule_is_named(tracker: Tracker, definition: Any, words: list[str]) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_pipeline("broken", definition)
    message = str(err.value)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not named in {message!r}"
    assert await tracker.list_pipelines() == []


async def test_the_base_definition_is_valid(tracker: Tracker) -> None:
    # guards the cases above: each breaks exactly one rule of a valid definition
    pid = await tracker.create_pipeline("fine", _base())
    assert (await tracker.get_pipeline(pid)).definition == _base()
    await tracker.create_pipeline("ttl", {**_base(), "default_queue_ttl_ms": 1_000})


async def test_to_unknown_message_says_where(tracker: Tracker) -> None:
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_pipeline("broken", _broken("transitions.1.to", "donee"))
    message = str(err.value)
    assert "review" in message
    assert "'donee'" in message or '"donee"' in message
    assert "#2" in message or "#1" in message  # the transition's position


async def test_duplicate_pipeline_name_is_a_conflict(tracker: Tracker) -> None:
    await tracker.create_pipeline("same", simple_pipeline())
    with pytest.raises(Conflict) as err:
        await tracker.create_pipeline("same", simple_pipeline())
    assert err.value.code == "duplicate_name"
    assert len(await tracker.list_pipelines()) == 1


async def test_unknown_pipeline(tracker: Tracker) -> None:
    with pytest.raises(NotFound) as err:
        await tracker.create_task(new_task("00000000-0000-4000-8000-000000000000"))
    assert err.value.code == "pipeline_not_found"
    assert await all_tasks(tracker) == []


async def test_dead_letter_stage_must_be_a_state(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(dead_letter_stage="graveyard")
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_task(new_task(pid, retry_policy=policy))
    assert "graveyard" in str(err.value)
    assert await all_tasks(tracker) == []


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param({"when": object()}, id="object"),
        pytest.param({"tags": {1, 2}}, id="set"),
        pytest.param({"blob": b"\x00\x01"}, id="bytes"),
    ],
)
async def test_metadata_must_be_json(tracker: Tracker, metadata: Any) -> None:
    pid = await make_pipeline(tracker)
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_task(new_task(pid, metadata=metadata))
    assert "metadata" in str(err.value)
    assert await all_tasks(tracker) == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        pytest.param({"title": "t" * 4097}, "title", id="title"),
        pytest.param({"description": "d" * (MIB + 1)}, "description", id="description"),
        pytest.param({"metadata": {"blob": "m" * MIB}}, "metadata", id="metadata"),
        pytest.param({"priority": 2**63}, "priority", id="priority-high"),
        pytest.param({"priority": -(2**63) - 1}, "priority", id="priority-low"),
    ],
)
async def test_oversized_task_fields_are_refused(
    tracker: Tracker, fields: dict[str, Any], named: str
) -> None:
    pid = await make_pipeline(tracker)
    fields = {"title": "t", **fields}
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_task(new_task(pid, **fields))
    assert named in str(err.value)
    assert await all_tasks(tracker) == []


@pytest.mark.parametrize("metadata", [{}, {"nested": {"a": [True]}}, {"s": "x", "n": 1.5}])
async def test_metadata_may_be_any_json_object(tracker: Tracker, metadata: Any) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, metadata=metadata))
    assert (await tracker.get_task(tid)).metadata == metadata


@pytest.mark.parametrize("metadata", ["a string", [1, 2], 3, None, True])
async def test_metadata_must_be_an_object(tracker: Tracker, metadata: Any) -> None:
    # NullTickets takes any JSON value; executors and the worker read keys of it (timeout_s).
    pid = await make_pipeline(tracker)
    with pytest.raises(ValidationFailed, match="metadata must be a JSON object"):
        await tracker.create_task(new_task(pid, metadata=metadata))
    with pytest.raises(ValidationFailed, match="metadata must be a JSON object"):
        await tracker.create_tasks([new_task(pid, "ok"), new_task(pid, metadata=metadata)])
    assert await all_tasks(tracker) == []


async def test_largest_allowed_task_fields(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(
        new_task(pid, "t" * 4096, description="d" * MIB, priority=2**63 - 1)
    )
    low = await tracker.create_task(new_task(pid, "low", priority=-(2**63)))
    task = await tracker.get_task(tid)
    assert (len(task.title), len(task.description), task.priority) == (4096, MIB, 2**63 - 1)
    assert (await tracker.get_task(low)).priority == -(2**63)


@pytest.mark.requires(STRICT_LIMITS)
async def test_oversized_event_data_is_refused(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    with pytest.raises(ValidationFailed) as err:
        await tracker.add_event(lease, "log", {"text": "x" * MIB})
    assert "data" in str(err.value)
    assert await run_events(tracker, lease.run.id) == []
    await tracker.heartbeat(lease)  # the lease is unaffected


async def test_event_data_must_be_json(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    with pytest.raises(ValidationFailed) as err:
        await tracker.add_event(lease, "log", {"when": object()})
    assert "data" in str(err.value)
    assert await run_events(tracker, lease.run.id) == []


async def test_store_value_must_be_json(tracker: Tracker) -> None:
    with pytest.raises(ValidationFailed):
        await tracker.store_put("ns", "k", {"x": object()})
    assert await tracker.store_list("ns") == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        pytest.param({"retry_policy": RetryPolicy(max_attempts=-1)}, "max_attempts", id="attempts"),
        pytest.param({"queue_ttl_ms": 0}, "queue_ttl_ms", id="queue-ttl-zero", marks=_EXT),
        pytest.param({"queue_ttl_ms": -5}, "queue_ttl_ms", id="queue-ttl-negative", marks=_EXT),
        pytest.param({"max_stale_attempts": -1}, "max_stale_attempts", id="stale", marks=_EXT),
        pytest.param({"concurrency_key": ""}, "concurrency_key", id="empty-key", marks=_EXT),
    ],
)
async def test_bad_policy_and_extension_fields_are_named(
    tracker: Tracker, fields: dict[str, Any], named: str
) -> None:
    pid = await make_pipeline(tracker)
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_task(new_task(pid, **fields))
    assert named in str(err.value)
    assert await all_tasks(tracker) == []


@pytest.mark.parametrize(("agent", "role"), [("", "coder"), ("agent-1", "")])
async def test_claim_needs_an_agent_and_a_role(tracker: Tracker, agent: str, role: str) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    with pytest.raises(ValidationFailed):
        await tracker.claim(agent, role, 60_000)
    assert (await claim(tracker)).run.attempt == 1


async def test_event_kind_must_not_be_empty(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_task(new_task(pid))
    lease = await claim(tracker)
    with pytest.raises(ValidationFailed) as err:
        await tracker.add_event(lease, "", {"x": 1})
    assert "kind" in str(err.value)
    assert await run_events(tracker, lease.run.id) == []


@pytest.mark.requires(WAIT)
async def test_wait_on_an_unknown_task_is_not_found(tracker: Tracker) -> None:
    with pytest.raises(NotFound):
        await tracker.wait("00000000-0000-4000-8000-000000000000", timeout_s=5)
