"""The python executor: import paths, return values, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.api import Failure, Transition
from plugins.python.executor import PythonExecutor
from plugins.registry import load_executor
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
        ("a_string", "returned the str 'complete', which is not an outcome and is not stored"),
        ("a_string", "; to send that trigger: Transition('complete')"),
        ("bad_dict", "unknown key(s) 'colour'"),
        ("bad_dict", 'report a result with ctx.report("result", {...}, flush=True)'),
        ("bad_trigger", "'trigger' must be a non-empty string, got 5"),
    ],
)
async def test_bad_return_values_fail_the_run(tmp_path: Path, name: str, problem: str) -> None:
    outcome = await run(name, tmp_path)
    assert isinstance(outcome, Failure)
    assert outcome.reason == "bad_executor_output"
    assert not outcome.retryable
    assert problem in outcome.message
    assert f"{MOD}:{name}" in outcome.message


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
