"""The public face of backlog-worker, declared once: which modules a user imports and which of
their names are public. Everything else in ``worker``, ``plugins`` and ``tracker_client`` is
internal and may change in any release without notice (docs/reference/stability.md).

Three things read this table: ``tests/test_public_api.py`` pins each module's ``__all__`` to it
(and, in its own lists, each public class's members) and checks that public signatures mention
only public types;
``docs/_ref/api.py`` generates one API reference page per module from it (mkdocstrings, at build
time); ``tests/docs/test_api_reference.py`` checks those pages document exactly these names.
Adding, removing or renaming a name here is a change to what users build on: make it on
purpose, with a CHANGELOG line, and under the deprecation policy of the stability page.

A module is either *whole* (its ``__all__`` is exactly ``names``) or *partly public*: its
``__all__`` also carries names the project uses inside (the rail's wire and lease models, the
``python`` executor's thread bookkeeping), and only ``names`` are public. The *data* modules'
names are exactly the types the other public names' signatures take and return (the test
computes that set and compares), so the face grows a model only when a signature needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FACE", "HANDED_OUT", "INTERNAL_MEMBERS", "ROLES", "PublicModule", "public_modules"]

Role = Literal["author", "application", "errors", "data"]

#: Who imports each role's modules, in the order the reference lists them.
ROLES: dict[Role, str] = {
    "author": "Writing an executor (a plugin author)",
    "application": "Putting work on the rail from an application (the producer API)",
    "errors": "The errors, caught by both",
    "data": "The data the public signatures take and return",
}


@dataclass(frozen=True)
class PublicModule:
    """One public module: its dotted name, who imports it, its public names and a one-line
    summary for the reference index."""

    module: str
    role: Role
    names: tuple[str, ...]
    summary: str
    #: ``True``: ``__all__`` is exactly ``names``. ``False`` (a partly public module):
    #: ``names`` is the public part of a larger ``__all__``.
    whole: bool = True
    #: The public module whose names this one re-exports (documented there, linked from here).
    same_as: str | None = None

    @property
    def page(self) -> str:
        """The module's reference page, its path under ``docs/``."""
        return f"reference/api/{self.module}.md"


FACE: tuple[PublicModule, ...] = (
    PublicModule(
        "plugins.api",
        "author",
        (
            "ENTRY_POINT_GROUP",
            "ContextSink",
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
        ),
        "The executor protocol, the context a run gets, and the outcomes it returns.",
    ),
    PublicModule(
        "plugins.testing",
        "author",
        ("ExecutorHarness", "RecordingSink"),
        "Run an executor in a test, without a worker or a rail.",
    ),
    PublicModule(
        "plugins.python.sync",
        "author",
        ("RunCancelled", "ThreadContext"),
        "The blocking context a plain `def` function of the `python` executor gets.",
        whole=False,
    ),
    PublicModule(
        "plugins.agent",
        "author",
        ("Store",),
        "The task's key-value memory an executor reaches as `ctx.store`.",
        whole=False,
    ),
    PublicModule(
        "tracker_client.producer",
        "application",
        ("Rail", "Submission", "SyncRail", "connect", "connect_sync"),
        "Submit, wait for, cancel and move tasks from application code, async or blocking.",
    ),
    PublicModule(
        "tracker_client",
        "application",
        ("Rail", "Submission", "SyncRail", "connect", "connect_sync"),
        "The producer API, importable from the package itself.",
        same_as="tracker_client.producer",
    ),
    PublicModule(
        "tracker_client.errors",
        "errors",
        (
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
        ),
        "Every error the project raises on purpose, under one `BacklogWorkerError`.",
    ),
    PublicModule(
        "tracker_client.models",
        "data",
        (
            "Artifact",
            "ArtifactCreate",
            "Assignment",
            "AvailableTransition",
            "BudgetStatus",
            "Dependency",
            "Event",
            "ListedRun",
            "ListedState",
            "Pipeline",
            "Run",
            "StoreEntry",
            "Task",
            "TaskDetail",
            "TransitionResult",
        ),
        "The task, its run, events, artifacts and pipeline, as executors and producers see them.",
        whole=False,
    ),
    PublicModule(
        "tracker_client.agent_models",
        "data",
        ("Upstream",),
        "What a task's run reads of the tasks it waited for.",
        whole=False,
    ),
    PublicModule(
        "tracker_client.ops_models",
        "data",
        ("CancelResult", "RequeueAllResult", "RequeueResult", "WaitResult"),
        "What the producer's cancel, requeue and wait answer.",
        whole=False,
    ),
    PublicModule(
        "tracker_client.capabilities",
        "data",
        ("Capabilities",),
        "What a rail can do, as `Rail.capabilities()` answers.",
        whole=False,
    ),
)

#: Classes a user is handed and never builds: the worker (or the harness) builds an
#: ``ExecutionContext`` and a ``ThreadContext``, the context its ``Store``, and
#: ``connect``/``connect_sync`` the rails.
#: Their constructors are internal, so their signatures may name internal types.
HANDED_OUT: frozenset[str] = frozenset(
    {
        "plugins.api.ExecutionContext",
        "plugins.python.sync.ThreadContext",
        "plugins.agent.Store",
        "tracker_client.producer.Rail",
        "tracker_client.producer.SyncRail",
    }
)


#: Attributes that look public (no underscore) on a public class but are not: the reference
#: leaves them out and the stability page names them. ``Rail.tracker`` is the tracker a rail
#: wraps, there for the project's own tests and tools.
INTERNAL_MEMBERS: dict[str, frozenset[str]] = {
    "tracker_client.producer.Rail": frozenset({"tracker"}),
}


def public_modules() -> dict[str, PublicModule]:
    """The face by module name."""
    return {m.module: m for m in FACE}
