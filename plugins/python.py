"""The ``python`` executor: call an async function in the worker's process.

Options::

    callable = "mypkg.jobs:summarise"     # required: "package.module:function"

The function is imported when the worker starts (so ``backlog-worker check`` catches a typo) and
is awaited with the :class:`~plugins.api.ExecutionContext` once per task. It returns an outcome
(:class:`~plugins.api.Transition` / :class:`~plugins.api.Failure`), ``None`` (= the role's
default trigger) or a dict ``{"trigger": ..., "instructions": ..., "usage": ...}`` (every key
optional). Anything else fails the run with reason ``bad_executor_output``. An exception it
raises fails the run through the worker (an ``error`` event with the traceback tail).
The role's other options reach the function as ``ctx.options``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from plugins.api import ExecutionContext, Failure, Outcome, Transition
from tracker_client.errors import ExecutorError

__all__ = ["PythonExecutor", "import_callable"]

TaskFunction = Callable[[ExecutionContext], Awaitable[Any]]
_DICT_KEYS = frozenset({"trigger", "instructions", "usage"})


def _is_async(obj: Any) -> bool:
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)  # noqa: B004 - an instance with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def import_callable(path: str) -> TaskFunction:
    """Import ``"package.module:function"`` (dotted attributes allowed after the colon).

    Raises :class:`ExecutorError` naming the path when it is malformed, cannot be imported, or
    is not an async callable.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ExecutorError(
            f"python option 'callable' must look like 'package.module:function', got {path!r}"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ExecutorError(
            f"python option 'callable' {path!r}: cannot import module {module_name!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ExecutorError(
                f"python option 'callable' {path!r}: {module_name!r} has no attribute {attr!r}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise ExecutorError(
            f"python option 'callable' {path!r} is a {type(obj).__name__}, not a function"
        )
    if not _is_async(obj):
        raise ExecutorError(
            f"python option 'callable' {path!r} must be an async function "
            "(async def f(ctx) -> Outcome)"
        )
    return cast(TaskFunction, obj)


class PythonExecutor:
    """Awaits the configured async function with the context and maps what it returns."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        path = options.get("callable")
        if not isinstance(path, str) or not path:
            raise ExecutorError("python option 'callable' is required: 'package.module:function'")
        self.path = path
        self.function = import_callable(path)

    async def readiness(self) -> list[str]:
        """The function was imported at construction; nothing more to check."""
        return []

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        """Call the function and turn its result into an outcome."""
        result = await self.function(ctx)
        return self._outcome(result)

    def _outcome(self, result: Any) -> Outcome:
        if isinstance(result, Transition | Failure):
            return result
        if result is None:
            return Transition()
        if isinstance(result, Mapping):
            unknown = sorted(str(k) for k in set(result) - _DICT_KEYS)
            trigger = result.get("trigger")
            instructions = result.get("instructions")
            problem = None
            if unknown:
                problem = f"unknown key(s) {', '.join(map(repr, unknown))}"
            elif trigger is not None and (not isinstance(trigger, str) or not trigger):
                problem = f"'trigger' must be a non-empty string, got {trigger!r}"
            elif instructions is not None and not isinstance(instructions, str):
                problem = "'instructions' must be a string"
            if problem is None:
                return Transition(
                    trigger=trigger, instructions=instructions, usage=result.get("usage")
                )
            return Failure(
                reason="bad_executor_output",
                message=f"{self.path} returned a dict with {problem} "
                "(allowed: trigger, instructions, usage)",
                retryable=False,
            )
        return Failure(
            reason="bad_executor_output",
            message=f"{self.path} returned {type(result).__name__}; expected Transition, "
            "Failure, a dict or None",
            retryable=False,
        )
