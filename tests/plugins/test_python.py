"""The python executor: import paths, return values, errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from plugins.api import Failure, Transition
from plugins.python.executor import PythonExecutor
from plugins.registry import load_executor
from plugins.results import MAX_INLINE_RESULT_BYTES, RESULT_FILE
from plugins.testing import ExecutorHarness
from tracker_client.errors import ExecutorError

pytestmark = pytest.mark.anyio

MOD = "tests.plugins.sample_callables"


async def run(name: str, tmp_path: Path, **options: object) -> object:
    executor = PythonExecutor({"callable": f"{MOD}:{name}", **options})
    return await ExecutorHarness(title="T", workdir=tmp_path).run(executor)


async def test_outcome_reports_and_artifacts_pass_through(tmp_path: Path) -> None:
    options = {"callable": f"{MOD}:approve", "extra": 1}
    # as in a worker, the context carries the role's options
    harness = ExecutorHarness(title="T", workdir=tmp_path, options=options)
    executor = load_executor("python", options)
    assert await executor.readiness() == []  # type: ignore[attr-defined]
    assert await harness.run(executor) == Transition(trigger="approve", instructions="go")
    assert harness.events == [("progress", {"title": "T", "option": 1})]
    (artifact,) = harness.artifacts
    assert artifact.kind == "report"
    assert artifact.task_id == harness.task.id
    assert artifact.run_id == harness.run_model.id


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("give_up", Failure(reason="no_luck", message="nope", retryable=False)),
        ("nothing", Transition()),
        ("as_dict", Transition(trigger="reject", instructions="redo", usage={"tokens": 7})),
        ("instance", Transition(trigger="called")),
        ("Namespace.approve", Transition(trigger="approve", instructions="go")),
    ],
)
async def test_return_values(tmp_path: Path, name: str, expected: object) -> None:
    assert await run(name, tmp_path) == expected


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        # (until results were values, a returned str or data dict was refused; now only these)
        ("own_trigger_as_str", "returned the str 'approve', one of its own triggers"),
        ("own_trigger_as_str", "to send that trigger: Transition('approve')"),
        ("mixed_dict", "a dict mixing outcome key(s) 'trigger' with data key(s) 'summary'"),
        ("mixed_dict", 'put the data under "result": {"trigger": ..., "result": {...}}'),
        ("a_bool", "returned the bool False, which is neither an outcome nor taken as a result"),
        ("bad_trigger", "'trigger' must be a non-empty string, got 5"),
        ("a_set", "result that is not JSON: the result['tags'] is a set, not a JSON value"),
        ("not_a_number", "the result[1] is the float nan, not JSON"),
        ("int_keys", "the result has the key 1 (a int); JSON object keys are strings"),
        ("an_object", "the result is a object, not a JSON value"),
    ],
)
async def test_bad_return_values_fail_the_run(tmp_path: Path, name: str, problem: str) -> None:
    harness = ExecutorHarness(title="T", workdir=tmp_path)
    outcome = await harness.run(PythonExecutor({"callable": f"{MOD}:{name}"}))
    assert isinstance(outcome, Failure)
    assert outcome.reason == "bad_executor_output"
    assert not outcome.retryable
    assert problem in outcome.message
    assert f"{MOD}:{name}" in outcome.message
    assert harness.events == [] and harness.artifacts == []  # nothing half-kept


@pytest.mark.parametrize(
    ("name", "outcome", "result"),
    [
        ("celery_habit", Transition(), {"summary": "read T", "words": 3}),
        ("a_list", Transition(), [1, "two", None, 4.5, [5, 6]]),
        ("a_number", Transition(), 42),
        ("a_string", Transition(), "complete"),  # not one of its triggers: text, kept
        ("routed_with_result", Transition(trigger="approve"), {"score": 0.9}),
        ("only_result", Transition(), [1, 2]),  # as outcome.json's "result" key
        ("result_beside_data", Transition(), {"status": "ok", "result": [1, 2]}),  # no routing
        ("sync_result", Transition(), {"summary": "from a thread"}),
    ],
)
async def test_a_returned_json_value_is_the_tasks_result(
    tmp_path: Path, name: str, outcome: Transition, result: object
) -> None:
    harness = ExecutorHarness(title="T", workdir=tmp_path)
    assert await harness.run(PythonExecutor({"callable": f"{MOD}:{name}"})) == outcome
    assert harness.events == [("result", result)]
    assert harness.artifacts == []


async def test_a_big_result_becomes_an_artifact_holding_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    harness = ExecutorHarness(title="T", workdir=tmp_path / "run")
    assert await harness.run(PythonExecutor({"callable": f"{MOD}:big_result"})) == Transition()
    (artifact,) = harness.artifacts
    path = (
        tmp_path / "data" / "backlog-worker" / "artifacts" / harness.task.id
        / harness.run_model.id / RESULT_FILE
    )  # fmt: skip
    data = path.read_bytes()
    assert len(data) > MAX_INLINE_RESULT_BYTES
    assert json.loads(data) == {"rows": ["x" * 1000] * 100}
    assert (artifact.kind, artifact.uri) == ("result", path.as_uri())
    assert artifact.sha256 == hashlib.sha256(data).hexdigest()
    assert artifact.size_bytes == len(data)
    assert harness.events == [
        (
            "result",
            {
                "artifact_id": "artifact-1",  # the harness numbers them
                "uri": path.as_uri(),
                "size_bytes": len(data),
                "sha256": artifact.sha256,
            },
        )
    ]


async def test_exception_propagates_to_the_worker(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="kaboom"):
        await run("explode", tmp_path)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (None, r"'callable' is required"),
        ("", r"'callable' is required"),
        ("no_colon_here", r"must look like 'package\.module:function'"),
        ("no_such_module_xyz:f", r"'no_such_module_xyz:f': cannot import module"),
        (f"{MOD}:absent", r"has no attribute 'absent'"),
        (f"{MOD}:NOT_CALLABLE", r"is a int, not a function"),
        (f"{MOD}:AsyncCallable", r"is a class; name a function"),
    ],
)
def test_bad_callable_paths_are_named(path: str | None, message: str) -> None:
    with pytest.raises(ExecutorError, match=message):
        PythonExecutor({} if path is None else {"callable": path})


def test_registry_prefixes_python_errors() -> None:
    with pytest.raises(ExecutorError, match=r"^executor 'python': python option 'callable'"):
        load_executor("python", {"callable": "nope"})
