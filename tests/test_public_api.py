"""The public face, declared and pinned (as httpx's ``test_exported_members``).

Executor authors import :mod:`plugins.api` and :mod:`plugins.testing`; applications import the
producer API from :mod:`tracker_client`; both catch :mod:`tracker_client.errors`. A name added to
or removed from these lists is a change to what users build on: it must be made here on purpose,
and recorded in CHANGELOG.md. Every public name carries a docstring that says what it is for.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

PUBLIC = {
    "plugins.api": [
        "ContextSink",
        "ENTRY_POINT_GROUP",
        "ExecutionContext",
        "Executor",
        "ExecutorFactory",
        "Failure",
        "NamedTrigger",
        "Outcome",
        "ReportPolicy",
        "SupportsLeftovers",
        "SupportsReadiness",
        "SupportsTriggers",
        "Transition",
    ],
    "plugins.testing": ["ExecutorHarness", "RecordingSink"],
    "tracker_client": ["Rail", "Submission", "SyncRail", "Tracker", "connect", "connect_sync"],
    "tracker_client.producer": ["Rail", "Submission", "SyncRail", "connect", "connect_sync"],
    "tracker_client.errors": [
        "AnswerRefused",
        "BacklogFull",
        "BacklogWorkerError",
        "ConfigError",
        "Conflict",
        "ExecutorError",
        "InvalidTransition",
        "LeaseLost",
        "NoRail",
        "NotFound",
        "TokenRefused",
        "TrackerCorrupt",
        "TrackerError",
        "TrackerRejected",
        "TrackerUnavailable",
        "Unsupported",
        "ValidationFailed",
    ],
}

#: What an executor's ``ctx`` offers (docs/executors/plugin-api.md).
CONTEXT_METHODS = [
    "artifact",
    "artifact_file",
    "checkpoint",
    "flush",
    "has_buffered_reports",
    "read_upstream",
    "release_workdir",
    "report",
    "report_policy",
    "shutting_down",
    "spawn",
    "store",
    "take_reports",
    "time_remaining",
    "wait_shutdown",
    "workdir",
    "workdir_created",
]

#: What an application's rail handle offers (docs/submit/producer.md).
RAIL_METHODS = [
    "aclose",
    "cancel",
    "capabilities",
    "pipeline",
    "requeue",
    "requeue_dead_letters",
    "submit",
    "submit_many",
    "task",
    "transition",
    "wait",
]
SYNC_RAIL_METHODS = [
    "cancel",
    "close",
    "open",
    "rail",
    "requeue",
    "requeue_dead_letters",
    "submit",
    "submit_many",
    "task",
    "transition",
    "wait",
]


def public_members(cls: type) -> list[str]:
    return sorted(name for name in dir(cls) if not name.startswith("_"))


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_each_public_module_exports_exactly_its_declared_names(module: str) -> None:
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == sorted(PUBLIC[module])
    for name in imported.__all__:
        value = getattr(imported, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert (value.__doc__ or "").strip(), f"{module}.{name} has no docstring"


def test_the_executor_context_offers_its_declared_methods() -> None:
    from plugins.api import ExecutionContext

    assert public_members(ExecutionContext) == CONTEXT_METHODS


def test_the_producer_rails_offer_their_declared_methods() -> None:
    from tracker_client import Rail, SyncRail

    assert public_members(Rail) == RAIL_METHODS
    assert public_members(SyncRail) == SYNC_RAIL_METHODS
    for cls in (Rail, SyncRail):
        for name in public_members(cls):
            assert (getattr(cls, name).__doc__ or "").strip(), f"{cls.__name__}.{name}"


def test_every_error_is_a_backlog_worker_error() -> None:
    from tracker_client import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.BacklogWorkerError), name
