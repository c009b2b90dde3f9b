"""The public face, declared and pinned (as httpx's ``test_exported_members``).

Executor authors import :mod:`plugins.api` and :mod:`plugins.testing`; applications import the
producer API from :mod:`tracker_client`; both catch :mod:`tracker_client.errors`, and read the
data models those names take and return. The face is declared once, in ``docs/_ref/face.py``
(which the API reference is generated from); this file pins the code to it: each public
module's ``__all__``, each public class's members, and that a public signature names only
public types. A name added to or removed from the face is a change to what users build on: it
must be made on purpose, recorded in CHANGELOG.md, and follow docs/reference/stability.md.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docs._ref.face import FACE, HANDED_OUT, INTERNAL_MEMBERS, PublicModule, public_modules
from tracker_client.protocol import Tracker  # internal: the leak check's example

PROJECT = ("plugins", "tracker_client", "worker")
ROOT = Path(__file__).resolve().parent.parent

#: What an executor's ``ctx`` offers (docs/executors/plugin-api.md).
CONTEXT_METHODS = [
    "artifact",
    "artifact_file",
    "checkpoint",
    "flush",
    "read_upstream",
    "report",
    "report_cost",
    "shutting_down",
    "spawn",
    "store",
    "time_remaining",
    "wait_shutdown",
    "workdir",
]
#: What an executor reads of its ``ctx`` (set when the worker builds it).
CONTEXT_ATTRIBUTES = [
    "attempt",
    "deadline",
    "instructions",
    "logger",
    "options",
    "previous_checkpoint",
    "run",
    "task",
    "traceparent",
    "upstream",
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

#: Every other public class's own members: its fields, methods, properties and the attributes
#: its constructor sets (what it inherits from pydantic, ``Exception`` or ``Protocol`` is theirs).
MEMBERS: dict[str, list[str]] = {
    "plugins.api.ContextSink": ["emit_artifact", "emit_events"],
    "plugins.api.Executor": ["execute"],
    "plugins.api.ExecutorFactory": [],
    "plugins.api.Failure": ["details", "message", "reason", "retryable", "usage"],
    "plugins.api.NamedTrigger": ["source", "trigger"],
    "plugins.api.ReportPolicy": ["flush_interval_s", "max_bytes", "max_event_bytes", "max_events"],
    "plugins.api.SupportsLeftovers": ["leftovers", "refusal"],
    "plugins.api.SupportsReadiness": ["readiness"],
    "plugins.api.SupportsTriggers": ["triggers"],
    "plugins.api.Transition": ["instructions", "source", "trigger", "usage", "wait_for"],
    "plugins.testing.ExecutorHarness": [
        "artifacts",
        "cancel",
        "cancel_on_event",
        "cancelled",
        "context",
        "events",
        "events_of",
        "instructions",
        "keep_workdir",
        "logger",
        "options",
        "previous_checkpoint",
        "raise_errors",
        "report_policy",
        "run",
        "run_model",
        "signal_shutdown",
        "sink",
        "task",
        "timeout_s",
        "wait_for_event",
        "workdir",
    ],
    "plugins.testing.RecordingSink": [
        "artifacts",
        "checkpoints",
        "emit_artifact",
        "emit_events",
        "events",
        "pipelines",
        "read_upstream",
        "save_checkpoint",
        "spawn",
        "spawned",
        "store",
        "store_delete",
        "store_get",
        "store_list",
        "store_put",
        "store_search",
        "upstream",
        "wait_changed",
        "written",
    ],
    "plugins.python.sync.RunCancelled": [],
    "plugins.python.sync.ThreadContext": [
        "artifact",
        "artifact_file",
        "attempt",
        "cancel_event",
        "cancelled",
        "checkpoint",
        "close",
        "deadline",
        "flush",
        "instructions",
        "logger",
        "options",
        "previous_checkpoint",
        "read_upstream",
        "report",
        "report_cost",
        "run",
        "shutting_down",
        "spawn",
        "store",
        "task",
        "time_remaining",
        "traceparent",
        "upstream",
        "workdir",
    ],
    "plugins.agent.Store": ["delete", "get", "list", "put", "search"],
    "tracker_client.producer.Submission": [
        "budgets",
        "concurrency_key",
        "dedupe_key",
        "dedupe_window",
        "delay",
        "depends_on",
        "description",
        "metadata",
        "pipeline",
        "priority",
        "run_at",
        "title",
    ],
    **{
        f"tracker_client.errors.{name}": []
        for name in ("BacklogWorkerError", "ConfigError", "ExecutorError", "NoRail")
    },
    # an error's own members; what it inherits from its parent (tracker_client.errors's tree)
    # is the parent's
    **{
        f"tracker_client.errors.{name}": ["default_code"]
        for name in (
            "AnswerRefused",
            "Conflict",
            "LeaseLost",
            "NotFound",
            "TrackerCorrupt",
            "TrackerRejected",
            "TrackerUnavailable",
            "Unsupported",
            "ValidationFailed",
        )
    },
    "tracker_client.errors.TrackerError": ["code", "default_code", "message"],
    "tracker_client.errors.InvalidTransition": ["allowed", "default_code"],
    "tracker_client.errors.TokenRefused": ["default_code", "detail", "status"],
    "tracker_client.errors.BacklogFull": ["cap", "default_code", "depth", "retry_after_s", "role"],
    "tracker_client.models.Artifact": [
        "created_at_ms",
        "id",
        "kind",
        "meta",
        "run_id",
        "sha256",
        "size_bytes",
        "task_id",
        "uri",
    ],
    "tracker_client.models.ArtifactCreate": [
        "kind",
        "meta",
        "run_id",
        "sha256",
        "size_bytes",
        "task_id",
        "uri",
    ],
    "tracker_client.models.Assignment": [
        "active",
        "agent_id",
        "assigned_by",
        "created_at_ms",
        "task_id",
        "updated_at_ms",
    ],
    "tracker_client.models.AvailableTransition": ["required_gates", "to", "trigger"],
    "tracker_client.models.Dependency": ["depends_on_task_id", "resolved"],
    "tracker_client.models.Event": ["data", "id", "kind", "run_id", "task_id", "ts_ms"],
    "tracker_client.models.Pipeline": ["created_at_ms", "definition", "id", "name"],
    "tracker_client.models.ListedRun": ["agent_id", "attempt", "status"],
    "tracker_client.models.ListedState": ["blocked", "latest_run"],
    "tracker_client.models.Run": [
        "agent_id",
        "agent_role",
        "attempt",
        "ended_at_ms",
        "error",
        "id",
        "started_at_ms",
        "status",
        "task_id",
        "usage",
    ],
    "tracker_client.models.StoreEntry": [
        "created_at_ms",
        "key",
        "namespace",
        "updated_at_ms",
        "value",
    ],
    "tracker_client.models.Task": [
        "budgets",
        "concurrency_key",
        "created_at_ms",
        "dead_letter_reason",
        "dead_letter_stage",
        "dedupe_key",
        "description",
        "expires_at_ms",
        "id",
        "listed",
        "max_attempts",
        "max_stale_attempts",
        "metadata",
        "next_eligible_at_ms",
        "parent_id",
        "pipeline_id",
        "priority",
        "retry_delay_ms",
        "run_at_ms",
        "stage",
        "stale_streak",
        "task_version",
        "title",
        "updated_at_ms",
    ],
    # a Task, and its relations
    "tracker_client.models.TaskDetail": [
        "assignments",
        "available_transitions",
        "budget",
        "dependencies",
        "latest_run",
    ],
    "tracker_client.models.TransitionResult": ["new_stage", "previous_stage", "trigger"],
    "tracker_client.models.BudgetStatus": [
        "exceeded",
        "loops",
        "max_cost",
        "max_loops",
        "max_runs",
        "max_tokens",
        "rows",
        "runs",
        "spent_tokens",
        "spent_usd",
        "total_tokens",
        "total_usd",
    ],
    "tracker_client.agent_models.Upstream": [
        "artifacts",
        "outcome",
        "result",
        "stage",
        "task_id",
        "title",
    ],
    "tracker_client.ops_models.CancelResult": [
        "cancelled_descendants",
        "dead_letter_reason",
        "revoked_lease",
        "stage",
        "task_id",
    ],
    "tracker_client.ops_models.RequeueAllResult": [
        "batches",
        "by_reason",
        "dry_run",
        "pipeline_id",
        "requeued",
    ],
    "tracker_client.ops_models.RequeueResult": [
        "reset_attempts",
        "stage",
        "task_id",
        "task_version",
    ],
    "tracker_client.ops_models.WaitResult": [
        "artifacts",
        "finished",
        "outcome",
        "result_event",
        "task",
    ],
    "tracker_client.capabilities.Capabilities": [
        "answers_can_be_lost",
        "backlog_ops",
        "extensions",
        "max_lease_ttl_ms",
        "max_request_bytes",
        "release",
        "run_details",
        "strict_definitions",
        "strict_limits",
        "task_extensions",
        "wait",
    ],
}
#: Classes pinned by their own lists above (the method lists are older than ``MEMBERS``).
PINNED_APART = {
    "plugins.api.ExecutionContext",
    "tracker_client.producer.Rail",
    "tracker_client.producer.SyncRail",
}


# -- reading a class --------------------------------------------------------------------------
def public_members(cls: type) -> list[str]:
    return sorted(name for name in dir(cls) if not name.startswith("_"))


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] in PROJECT


def constructor_attributes(cls: type) -> set[str]:
    """The public attributes ``cls``'s own ``__init__`` sets on ``self`` (``self.x = ...``)."""
    init = vars(cls).get("__init__")
    if init is None or not inspect.isfunction(init):
        return set()
    try:
        source = inspect.getsource(init)
    except OSError:  # generated (a dataclass's): its fields are the class's annotations
        return set()
    found = set()
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and not target.attr.startswith("_")
            ):
                found.add(target.attr)
    return found


def constructor_attribute_types(cls: type) -> Iterator[tuple[str, Any]]:
    """``(attribute, hint)`` for each public attribute ``cls``'s own ``__init__`` sets whose type
    can be read: from its annotation (``self.x: T = ...``), from the annotated parameter it is
    set from (``self.task = task``, or ``task or ...``), or from the class it is made of
    (``self.store = Store(...)``)."""
    init = vars(cls).get("__init__")
    if init is None or not inspect.isfunction(init):
        return
    try:
        source = inspect.getsource(init)
    except OSError:
        return
    namespace = vars(inspect.getmodule(cls))
    parameters = typing.get_type_hints(init)
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, None
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if not (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and not target.attr.startswith("_")
        ):
            continue
        if isinstance(node, ast.AnnAssign):
            yield target.attr, eval(ast.unparse(node.annotation), namespace)
            continue
        if isinstance(value, ast.BoolOp):
            value = value.values[0]
        if isinstance(value, ast.Name) and value.id in parameters:
            yield target.attr, parameters[value.id]
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            made = namespace.get(value.func.id)
            if inspect.isclass(made):
                yield target.attr, made


def own_members(cls: type) -> list[str]:
    """The public members ``cls`` offers of its own: its fields, methods, properties and the
    attributes its constructor sets, with those of its internal bases (``_Model``). What it
    inherits from a public base is that base's pin; pydantic's, ``Exception``'s or
    ``Protocol``'s members are theirs."""
    public = face_objects()
    foreign = {n for base in cls.__mro__[1:] if not _ours(base) for n in dir(base)}
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is cls or (_ours(klass) and id(klass) not in public):
            names |= set(vars(klass)) | set(vars(klass).get("__annotations__", {}))
            names |= constructor_attributes(klass)
    return sorted(n for n in names - foreign if not n.startswith("_"))


def face_objects() -> dict[int, str]:
    """Each public object by identity, and its public name (``module.Name``)."""
    found: dict[int, str] = {}
    for public in FACE:
        module = importlib.import_module(public.module)
        for name in public.names:
            found.setdefault(id(getattr(module, name)), f"{public.module}.{name}")
    return found


def face_classes() -> Iterator[tuple[str, type]]:
    for public in FACE:
        if public.same_as is None:
            module = importlib.import_module(public.module)
            for name in public.names:
                value = getattr(module, name)
                if inspect.isclass(value):
                    yield f"{public.module}.{name}", value


# -- the types a signature names --------------------------------------------------------------
def _types(hint: Any) -> Iterator[type]:
    """Every class ``hint`` names, generics opened (``list[Task] | None`` -> list, Task)."""
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and origin is None:
        yield hint
    if isinstance(origin, type):
        yield origin
    for arg in typing.get_args(hint):
        yield from _types(arg)


def signature_types(ident: str, value: Any) -> Iterator[tuple[str, type]]:
    """``(where, type)`` for each class a public object's signature names: a function's
    parameters and return; a class's fields, its own public methods and properties, and its
    constructor (unless users are only handed it)."""
    if inspect.isclass(value):
        hidden = INTERNAL_MEMBERS.get(ident, frozenset())
        for base in value.__mro__[1:]:  # a public base's members are the class's too
            if _ours(base) and not base.__name__.startswith("_"):
                yield f"{ident}(base)", base
        fields = list(typing.get_type_hints(value).items())
        for klass in value.__mro__:
            if klass is value or _ours(klass):
                fields += constructor_attribute_types(klass)
        for field, hint in fields:
            if not field.startswith("_") and field not in hidden:
                for found in _types(hint):
                    yield f"{ident}.{field}", found
        for name, member in vars(value).items():
            if name.startswith("_") and not (name == "__init__" and ident not in HANDED_OUT):
                continue
            if name in hidden:
                continue
            function = member.fget if isinstance(member, property) else member
            function = getattr(function, "__func__", function)  # classmethod, staticmethod
            if inspect.isfunction(function):
                for hint in typing.get_type_hints(function).values():
                    for found in _types(hint):
                        yield f"{ident}.{name}", found
    elif inspect.isfunction(value):
        for hint in typing.get_type_hints(value).values():
            for found in _types(hint):
                yield ident, found


def leaks(ident: str, value: Any, public: dict[int, str]) -> list[str]:
    """Each internal type of the project a public signature names: ``where: module.Type``."""
    return [
        f"{where}: {found.__module__}.{found.__qualname__}"
        for where, found in signature_types(ident, value)
        if _ours(found) and id(found) not in public
    ]


# -- the module pins --------------------------------------------------------------------------
@pytest.mark.parametrize("public", FACE, ids=lambda p: p.module)
def test_each_public_module_exports_its_declared_names(public: PublicModule) -> None:
    module = importlib.import_module(public.module)
    if public.whole:
        assert sorted(module.__all__) == sorted(public.names)
    else:
        assert set(public.names) <= set(module.__all__), "a public name left __all__"
    if public.same_as is not None:
        home = importlib.import_module(public.same_as)
        for name in public.names:
            assert getattr(module, name) is getattr(home, name), name


@pytest.mark.parametrize("public", FACE, ids=lambda p: p.module)
def test_every_public_name_resolves_and_says_what_it_is_for(public: PublicModule) -> None:
    module = importlib.import_module(public.module)
    for name in public.names:
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert (value.__doc__ or "").strip(), f"{public.module}.{name} has no docstring"
            assert value.__module__.split(".")[0] in PROJECT, name


def test_the_face_lists_each_module_once_and_its_side_lists_name_face_classes() -> None:
    assert len(public_modules()) == len(FACE)
    classes = dict(face_classes())
    assert set(HANDED_OUT) <= set(classes)
    assert set(INTERNAL_MEMBERS) <= set(classes)
    assert set(MEMBERS) | PINNED_APART == set(classes)


# -- the signatures ---------------------------------------------------------------------------
#: Internal types a public signature names today: debt, which may only shrink. A plain
#: ``def``'s ``ctx.store`` is a ``ThreadStore``, which ``plugins.python.sync`` does not export.
KNOWN_LEAKS = ["plugins.python.sync.ThreadContext.store: plugins.python.sync.ThreadStore"]


def test_public_signatures_name_only_public_types() -> None:
    public = face_objects()
    found = []
    for ident, value in [*face_classes(), *_face_functions()]:
        found += leaks(ident, value, public)
    assert sorted(set(found)) == KNOWN_LEAKS, "a public signature names an internal type"


def _face_functions() -> Iterator[tuple[str, Any]]:
    for public in FACE:
        module = importlib.import_module(public.module)
        for name in public.names:
            if inspect.isfunction(getattr(module, name)):
                yield f"{public.module}.{name}", getattr(module, name)


def test_the_leak_check_sees_an_internal_type() -> None:
    def opens(url: str) -> Tracker:
        """Would put the internal ``Tracker`` protocol on the face."""
        raise NotImplementedError

    assert leaks("example.opens", opens, face_objects()) == [
        "example.opens: tracker_client.protocol.Tracker"
    ]
    assert leaks("example.opens", opens, {id(Tracker): "tracker_client.Tracker"}) == []


def test_the_leak_check_reads_the_attributes_a_constructor_sets() -> None:
    class Handle:
        """An example public class."""

        def __init__(self, tracker: Tracker, name: str) -> None:
            self.tracker = tracker  # from an annotated parameter
            self.label: str = name
            self.spare = Tracker  # neither: a class, not an instance of one made here
            self._hidden = tracker

    assert dict(constructor_attribute_types(Handle)) == {"tracker": Tracker, "label": str}
    assert leaks("example.Handle", Handle, face_objects()) == [
        "example.Handle.tracker: tracker_client.protocol.Tracker",
        "example.Handle.__init__: tracker_client.protocol.Tracker",
    ]


def test_the_data_models_are_exactly_what_public_signatures_reach() -> None:
    """A model joins the face only when a public signature takes or returns it."""
    public = face_objects()
    reached = {
        public[id(found)]
        for ident, value in [*face_classes(), *_face_functions()]
        for _, found in signature_types(ident, value)
        if id(found) in public
    }
    data = {f"{m.module}.{n}" for m in FACE if m.role == "data" for n in m.names}
    assert data - reached == set(), "a data model no public signature names"


# -- the class pins ---------------------------------------------------------------------------
@pytest.mark.parametrize("ident", sorted(MEMBERS))
def test_each_public_class_offers_its_declared_members(ident: str) -> None:
    cls = dict(face_classes())[ident]
    assert own_members(cls) == sorted(MEMBERS[ident])


def test_the_executor_context_offers_its_declared_methods() -> None:
    from plugins.api import ExecutionContext

    assert public_members(ExecutionContext) == CONTEXT_METHODS
    assert sorted(constructor_attributes(ExecutionContext)) == CONTEXT_ATTRIBUTES


def test_the_producer_rails_offer_their_declared_methods() -> None:
    from tracker_client import Rail, SyncRail

    assert public_members(Rail) == RAIL_METHODS
    assert public_members(SyncRail) == SYNC_RAIL_METHODS
    for cls in (Rail, SyncRail):
        for name in public_members(cls):
            assert (getattr(cls, name).__doc__ or "").strip(), f"{cls.__name__}.{name}"
    # Rail.tracker, the tracker a rail wraps, is internal (docs/_ref/face.py INTERNAL_MEMBERS)
    assert constructor_attributes(Rail) == INTERNAL_MEMBERS["tracker_client.producer.Rail"]
    assert constructor_attributes(SyncRail) == set()


def test_the_member_reader_sees_fields_methods_and_constructor_attributes() -> None:
    from tracker_client.errors import BacklogFull, TrackerError

    assert {"code", "default_code"} <= set(own_members(TrackerError))
    assert "args" not in own_members(TrackerError)  # Exception's, not ours
    assert set(own_members(BacklogFull)) >= {"role", "depth", "cap"}


def test_the_tracker_protocol_left_the_face_with_a_deprecation_warning() -> None:
    import tracker_client

    assert "Tracker" not in tracker_client.__all__
    with pytest.warns(DeprecationWarning, match=r"tracker_client.Tracker is internal.*0\.2"):
        assert tracker_client.Tracker is Tracker
    with pytest.raises(AttributeError, match="'Trackers'"):
        _ = tracker_client.Trackers


def test_every_error_is_a_backlog_worker_error() -> None:
    from tracker_client import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.BacklogWorkerError), name


# -- the built-in executors, as plugin authors ------------------------------------------------
#: What the built-in executors import of the project beyond the public face, by package: what a
#: third-party executor doing the same could not import with a promise. The list may only
#: shrink (each entry made public, or the need removed); a new reach fails here.
BUILTIN_REACH: dict[str, dict[str, list[str]]] = {
    "plugins.command": {
        "plugins.agent": ["checkpoint_json"],
        "plugins.artifact_files": ["default_artifacts_dir", "path_component"],
        "plugins.proc.process": [
            "ProcessResult",
            "SpawnError",
            "decode_output",
            "minimal_env",
            "run_process",
            "trace_env",
        ],
        "plugins.results": ["record_result"],
        "tracker_client.validation": ["describe_options", "must"],
    },
    "plugins.python": {
        "plugins.results": ["record_result"],
        "tracker_client.validation": ["describe_options", "must"],
    },
    "plugins.nullclaw": {
        "plugins.agent": ["AgentUnsupported"],
        "plugins.proc.process": [
            "ProcessResult",
            "SpawnError",
            "decode_output",
            "minimal_env",
            "run_process",
            "trace_env",
        ],
        "plugins.proc.redact": ["Redactor"],
        "tracker_client.validation": ["describe_options"],
    },
}


def reach_beyond_the_face(package: str, root: Path = ROOT) -> dict[str, list[str]]:
    """What ``package``'s modules import of the project that the face does not offer (its own
    modules aside), every import counted, also one inside a function."""
    face = {m.module: set(m.names) for m in FACE}
    found: dict[str, set[str]] = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                module, names = node.module, {alias.name for alias in node.names}
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name not in face:
                        found.setdefault(alias.name, set()).add("*")
                continue
            else:
                continue
            if module.split(".")[0] not in PROJECT or module.startswith(package):
                continue
            outside = names - face.get(module, set())
            if outside:
                found.setdefault(module, set()).update(outside)
    return {
        module: sorted(names)
        for module, names in sorted(found.items())
        if module.split(".")[0] in PROJECT and not module.startswith(package)
    }


@pytest.mark.parametrize("package", sorted(BUILTIN_REACH))
def test_the_built_in_executors_reach_beyond_the_face_only_where_listed(package: str) -> None:
    assert reach_beyond_the_face(package) == BUILTIN_REACH[package]


def test_the_reach_check_sees_an_internal_import(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "x.py").write_text(
        "from plugins.api import Transition\n"
        "from mine.y import helper\n"
        "def f():\n"
        "    from worker.scrub import Scrubber\n"
        "    import tracker_client.protocol\n",
        encoding="utf-8",
    )
    assert reach_beyond_the_face("mine", tmp_path) == {
        "tracker_client.protocol": ["*"],
        "worker.scrub": ["Scrubber"],
    }
