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
"usage": ..., "result": ...}`` (every key optional; ``result`` is kept as the task's result).
Any other JSON value it returns (a dict without those keys, a list, a number, a str) is the
task's result, kept by :func:`plugins.results.record_result`, and the run goes on with the
default trigger (``docs/executors/python-jobs.md``). Refused with ``bad_executor_output``,
saying how to return what was meant: a value that is not JSON, a dict mixing outcome keys with
data keys, a bool (``False`` would read as a failure), and a str naming one of the function's
literal triggers (``"approve"``: a trigger meant, or text?). An exception it raises fails the
run through the worker (an ``error`` event with the traceback tail). The role's other options
reach the function as ``ctx.options`` (the option is checked by :mod:`plugins.python.options`).

It may touch the module it imports (once, when the worker builds the executor), the function it
calls (in the worker's process, with the run's context) and, through
:func:`~plugins.results.record_result`, a big result's file; it starts no process and never sees
the tracker.
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
from plugins.results import record_result
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
        self._literal_triggers: set[str] | None = None

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
        if isinstance(result, _OUTCOMES):
            return result  # (most runs: no coroutine of _outcome's to make)
        return await self._outcome(ctx, result)

    async def _outcome(self, ctx: ExecutionContext, returned: Any) -> Outcome:
        """An outcome routes; any other JSON value is the task's result (then the default
        trigger); a dict mixing outcome keys with data, a bool, or a str naming one of the
        function's literal triggers is refused, saying how to return what was meant."""
        if isinstance(returned, _OUTCOMES):
            return returned
        if returned is None:
            return Transition()
        if isinstance(returned, Mapping) and (
            set(returned) <= {"result"} or set(returned) & _DICT_KEYS  # {}, {"result": ...}
        ):
            return await self._outcome_dict(ctx, returned)
        if isinstance(returned, bool):
            return self._refuse(
                f"the bool {returned!r}, which is neither an outcome nor taken as a result "
                "(False would read as a failure)",
                "return None or Transition(...) to go on, Failure(reason=..., message=...) to "
                'fail, or {"ok": ...} to keep it as the result',
            )
        if isinstance(returned, str) and returned in self._trigger_names():
            return self._refuse(
                f"the str {returned[:40]!r}, one of its own triggers, which is ambiguous",
                f"to send that trigger: Transition({returned[:40]!r}); to keep the text as the "
                f'result: {{"trigger": ..., "result": {returned[:40]!r}}} or a dict of your own',
            )
        return await self._result(ctx, returned, Transition())

    async def _outcome_dict(self, ctx: ExecutionContext, returned: Mapping[Any, Any]) -> Outcome:
        """A dict naming outcome keys: routes (with ``result`` recorded first), or refused."""
        data_keys = sorted(str(k) for k in set(returned) - _DICT_KEYS - {"result"})
        if data_keys:
            outcome_keys = sorted(str(k) for k in set(returned) & _DICT_KEYS)
            return self._refuse(
                f"a dict mixing outcome key(s) {', '.join(map(repr, outcome_keys))} with data "
                f"key(s) {', '.join(map(repr, data_keys))}",
                'to route and keep a result, put the data under "result": '
                '{"trigger": ..., "result": {...}}; or return the data alone (the default '
                "trigger)",
            )
        trigger = returned.get("trigger")
        problem = None
        if trigger is not None and (not isinstance(trigger, str) or not trigger):
            problem = f"'trigger' must be a non-empty string, got {trigger!r}"
        elif not isinstance(returned.get("instructions"), str | None):
            problem = "'instructions' must be a string"
        if problem is not None:
            return Failure(
                reason="bad_executor_output",
                message=f"{self.path} returned a dict with {problem} "
                "(allowed: trigger, instructions, usage, result)",
                retryable=False,
            )
        outcome = Transition(
            trigger=trigger, instructions=returned.get("instructions"), usage=returned.get("usage")
        )
        if "result" not in returned:
            return outcome
        return await self._result(ctx, returned["result"], outcome)

    async def _result(self, ctx: ExecutionContext, value: Any, outcome: Outcome) -> Outcome:
        """Record ``value`` as the task's result, then ``outcome``; or why it was not kept."""
        failure = await record_result(ctx, value, source=self.path)
        return outcome if failure is None else failure

    def _trigger_names(self) -> set[str]:
        """The function's literal triggers (read once, from its source)."""
        if self._literal_triggers is None:
            self._literal_triggers = {named.trigger for named in self.triggers()}
        return self._literal_triggers

    def _refuse(self, what: str, how: str) -> Failure:
        """The failure of a return value that is neither an outcome nor a result."""
        return Failure(
            reason="bad_executor_output",
            message=f"{self.path} returned {what}: {how}",
            retryable=False,
        )
