"""Find and build executor plugins.

Executors are registered under the entry-point group ``backlog_worker.executors``
(:data:`plugins.api.ENTRY_POINT_GROUP`); each entry point names a factory (usually the class)
that is called with the role's options mapping and returns an :class:`~plugins.api.Executor`.
The built-in executors are also known without installed metadata, so a source checkout works.
A role may also name a factory directly as ``"package.module:attribute"``.

Every problem is an :class:`~tracker_client.errors.ExecutorError` naming the plugin: not
installed (with the installed ones listed), failing to import, rejecting its options, or
building something that is not an executor.

It may touch the installed packages' entry points and the modules they name (imported), and calls
the factories; it never runs an executor.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from plugins.api import ENTRY_POINT_GROUP, Executor
from tracker_client.errors import ExecutorError

__all__ = ["BUILTIN_EXECUTORS", "installed_executors", "load_executor", "load_factory"]

logger = logging.getLogger("backlog_worker.executor.registry")

#: The executors shipped with backlog-worker (also declared as entry points in pyproject.toml).
BUILTIN_EXECUTORS: Mapping[str, str] = {
    "command": "plugins.command:CommandExecutor",
    "python": "plugins.python:PythonExecutor",
    "nullclaw": "plugins.nullclaw:NullClawExecutor",
}


def installed_executors() -> dict[str, EntryPoint]:
    """Every executor name known now: installed entry points, then the built-ins not among them.

    When two distributions register the same name, the first one found wins (and a warning names
    both), as :mod:`importlib.metadata` lists them in ``sys.path`` order.
    """
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            if found[ep.name].value != ep.value:
                logger.warning(
                    "executor %r is registered twice (%s and %s); using the first",
                    ep.name,
                    found[ep.name].value,
                    ep.value,
                    extra={"action": "executor_duplicate"},
                )
            continue
        found[ep.name] = ep
    for name, value in BUILTIN_EXECUTORS.items():
        found.setdefault(name, EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP))
    return dict(sorted(found.items()))


def _import_path(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ExecutorError(f"executor path {path!r} must look like 'package.module:attribute'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ExecutorError(
            f"executor {path!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ExecutorError(
                f"executor {path!r}: module {module_name!r} has no attribute {attr!r}"
            ) from exc
    return obj


def load_factory(name: str) -> Any:
    """The factory registered as ``name`` (or at ``"package.module:attribute"``), imported."""
    if ":" in name:
        return _import_path(name)
    known = installed_executors()
    ep = known.get(name)
    if ep is None:
        listed = ", ".join(known) or "none"
        raise ExecutorError(
            f"no executor plugin named {name!r} is installed (installed: {listed}); install the "
            f"package that registers it under the entry-point group {ENTRY_POINT_GROUP!r} "
            f"or fix the role's 'executor'"
        )
    try:
        return ep.load()
    except Exception as exc:
        raise ExecutorError(
            f"executor plugin {name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc


def load_executor(name: str, options: Mapping[str, Any] | None = None) -> Executor:
    """Build the executor ``name`` from a role's ``options``.

    Raises :class:`ExecutorError` naming the plugin when it is missing, fails to import, rejects
    its options, or returns something without an ``async def execute(ctx)``.
    """
    factory = load_factory(name)
    if not callable(factory):
        raise ExecutorError(
            f"executor plugin {name!r} names a {type(factory).__name__}, not a factory; "
            "it must be a class or function taking the role's options"
        )
    try:
        executor = factory(dict(options or {}))
    except ExecutorError as exc:
        raise ExecutorError(f"executor {name!r}: {exc}") from exc
    except Exception as exc:
        raise ExecutorError(
            f"executor plugin {name!r} failed to build from its options: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    execute = getattr(executor, "execute", None)
    if not isinstance(executor, Executor) or not inspect.iscoroutinefunction(execute):
        raise ExecutorError(
            f"executor plugin {name!r} built a {type(executor).__name__}, which has no "
            "'async def execute(self, ctx)' method"
        )
    return executor
