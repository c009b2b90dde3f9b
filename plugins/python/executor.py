"""The ``python`` executor: call a function in the worker's process.

Options::

    callable = "mypkg.jobs:summarise"     # required: "package.module:function"
    max_abandoned_threads = 8             # threads of cancelled runs that may still run

The function is imported when the worker starts (so ``backlog-worker check`` catches a typo) and
is called once per task. An ``async def`` is awaited with the
:class:`~plugins.api.ExecutionContext`; a plain ``def`` runs in its own thread with a
:class:`~plugins.python.sync.ThreadContext` (blocking ``report``/``artifact``/``artifact_file``,
and ``cancelled``/``cancel_event`` to stop cooperatively: a thread cannot be interrupted, so a
cancelled run ends at once and the thread is abandoned, see :mod:`plugins.python.sync`; past
``max_abandoned_threads`` of them still running, the worker claims nothing more for the role).
It returns an outcome (:class:`~plugins.api.Transition` / :class:`~plugins.api.Failure`),
``None`` (= the role's default trigger) or a dict ``{"trigger": ..., "instructions": ...,
"usage": ...}`` (every key optional). Anything else fails the run with reason
``bad_executor_output``. An exception it raises fails the run through the worker (an ``error``
event with the traceback tail). The role's other options reach the function as ``ctx.options``
(the option is checked by :mod:`plugins.python.options`).

It may touch the module it imports (once, when the worker builds the executor) and the function it
calls (in the worker's process, with the run's context); it starts no process and never sees the
tracker.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from plugins.api import ExecutionContext, Failure, NamedTrigger, Outcome, Transition
from plugins.python.options import parse_options, split_callable
from plugins.python.outcomes import literal_triggers
from plugins.python.sync import AbandonedThreads, ThreadContext, run_in_thread
from tracker_client.errors import ExecutorError

__all__ = ["PythonExecutor", "import_callable", "is_async_callable"]

#: An ``async def f(ctx: ExecutionContext)`` or a plain ``def f(ctx: ThreadContext)``.
TaskFunction = Callable[[ExecutionContext], Awaitable[Any]] | Callable[[ThreadContext], Any]
_DICT_KEYS = frozenset({"trigger", "instructions", "usage"})


def is_async_callable(obj: Any) -> bool:
    """True for an async function (or an object with an async ``__call__``)."""
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)  # noqa: B004 - an instance with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _not_found_hint(exc: Exception, module_name: str) -> str:
    """Where to put the job's module when it (or its package) is not on the import path; nothing
    when the module was found but something it imports is missing (that is an install away)."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing is None or not (module_name == missing or module_name.startswith(f"{missing}.")):
        return ""
    return (
        "; if it is a file of yours, list its directory in [worker] python_path "
        "(relative to the worker config's directory), or install it as a package"
    )


def import_callable(path: str) -> TaskFunction:
    """Import ``"package.module:function"`` (dotted attributes allowed after the colon).

    Raises :class:`ExecutorError` naming the path when it is malformed, cannot be imported, or
    is not callable (a class is refused too: it would be instantiated per task).
    """
    try:
        module_name, attr = split_callable(path)
    except ValueError as exc:
        raise ExecutorError(f"python option 'callable' {exc}") from None
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ExecutorError(
            f"python option 'callable' {path!r}: cannot import module {module_name!r}: "
            f"{type(exc).__name__}: {exc}{_not_found_hint(exc, module_name)}"
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
    if isinstance(obj, type):
        raise ExecutorError(
            f"python option 'callable' {path!r} is a class; name a function "
            "(async def f(ctx) or def f(ctx))"
        )
    return cast(TaskFunction, obj)


#: What a function may return as is (a tuple: ``Transition | Failure`` is built at each use).
_OUTCOMES = (Transition, Failure)


class PythonExecutor:
    """Calls the configured function with the context and maps what it returns."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = parse_options(options)
        self.path = self.options.callable
        self.function = import_callable(self.path)
        self.is_async = is_async_callable(self.function)
        #: Threads of this role's cancelled runs still running (plain ``def`` only).
        self.abandoned = AbandonedThreads()

    def triggers(self) -> list[NamedTrigger]:
        """The literal triggers of the function's body (:mod:`plugins.python.outcomes`)."""
        return literal_triggers(self.function, self.path)

    async def readiness(self) -> list[str]:
        """The function was imported at construction; the abandoned threads are under the cap."""
        refusal = self.refusal()
        return [] if refusal is None else [refusal]

    def leftovers(self) -> tuple[int, int]:
        """Abandoned threads still running, and ``max_abandoned_threads``."""
        return self.abandoned.count(), self.options.max_abandoned_threads

    def refusal(self) -> str | None:
        """Why no new run may start: as many abandoned threads as the cap, or None."""
        running, cap = self.leftovers()
        if running < cap:
            return None
        return (
            f"{running} thread(s) of cancelled runs of {self.path} are still running "
            f"(max_abandoned_threads = {cap}): the function ignores ctx.cancelled; no new run "
            "until some return (restart the worker to end them)"
        )

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        """Call the function (a plain ``def`` in its own thread) and map its result."""
        if self.is_async:
            # (the casts' types as strings: a subscripted Callable is built at each evaluation)
            result = await cast("Callable[[ExecutionContext], Awaitable[Any]]", self.function)(ctx)
        else:
            function = cast("Callable[[ThreadContext], Any]", self.function)
            result = await run_in_thread(function, ThreadContext(ctx), self.path, self.abandoned)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()  # never awaited: close it so no warning fires later
                return Failure(
                    reason="bad_executor_output",
                    message=f"{self.path} returned an awaitable from a plain call; "
                    "declare it async def to have it awaited",
                    retryable=False,
                )
        return self._outcome(result)

    def _outcome(self, result: Any) -> Outcome:
        if isinstance(result, _OUTCOMES):
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
            if unknown:  # data returned as a result (the Celery habit), not an outcome
                return self._not_an_outcome(f"a dict with {problem}", report=True)
            return Failure(
                reason="bad_executor_output",
                message=f"{self.path} returned a dict with {problem} "
                "(allowed: trigger, instructions, usage)",
                retryable=False,
            )
        what = type(result).__name__
        if isinstance(result, str) and result:
            # return "approve": a trigger meant, or text meant as the result
            return self._not_an_outcome(
                f"the str {result[:40]!r}", report=True, hint=f"Transition({result[:40]!r})"
            )
        return self._not_an_outcome(what, report=not isinstance(result, bool))

    def _not_an_outcome(self, what: str, *, report: bool, hint: str | None = None) -> Failure:
        """The failure of a return value that is not an outcome, saying how to return one and,
        for data, how a result is kept (a return value is not stored anywhere)."""
        outcomes = (
            "None (the stage's way out or the role's default trigger), Transition(\"trigger\"), "
            'Failure(...) or {"trigger": ..., "instructions": ..., "usage": ...}'
        )
        message = f"{self.path} returned {what}, which is not an outcome"
        if report:
            message += (
                ' and is not stored: report a result with ctx.report("result", {...}, '
                "flush=True) (awaited in an async def; `submit --wait` and `task show` print it), "
                f"keep files with ctx.artifact_file(path, copy_to=...), then return {outcomes}"
            )
        else:
            message += f": return {outcomes}"
        if hint:
            message += f"; to send that trigger: {hint}"
        return Failure(reason="bad_executor_output", message=message, retryable=False)
