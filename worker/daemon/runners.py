"""The tasks the claim loop's claims and runs go to: parked between jobs, not spawned per job.

A spawned anyio task costs ~12 us of the event loop's CPU (its handle, its cancel scope, its
done callback), paid once per run: a good share of a no-op task's cost in the worker
(docs/benchmarks.md). :class:`Runners` keeps the tasks that finished a job parked instead, each
on a :class:`~worker.wake.Wake`, and hands the next job to one of them (~3 us); only when none is
parked does it spawn one in the worker's task group of runs. So the pool grows to the most jobs
ever running at once (at most the slots' claims and twice ``concurrency`` runs: a run's slot
goes back before its final report) and stays there.

Each task also enters one cancel scope for its whole life and hands it to every job it runs,
first of its arguments: a run uses it as its own (:meth:`TaskRun.execute
<worker.run.TaskRun.execute>`: the lease's end moves its deadline, a lost lease or the worker's
stop cancels it) instead of making, entering and leaving a scope of its own (anyio looks its
backend up to make one): ~9 % fewer instructions per no-op task in the worker. A scope cannot
be entered twice nor un-cancelled, so a job that leaves it cancelled (a run its lease's end or
the worker's stop cut short, after that run's own final report) ends its task; the next job
goes to a parked task or a new one. A job gets the scope as it was handed to the first: no
deadline, not shielded, not cancelled.

A job runs exactly as it would in a task of its own spawned at that moment, but for its context
variables: a job sees what the jobs before it on the same task set and did not reset (the
worker's own, :data:`plugins.proc.guard.kill_deadline` and the run's trace, are reset at the
end of each run). A job handed to a task at the moment the group is cancelled still runs, and
meets the cancellation at its first checkpoint, as a task spawned then would. :meth:`close`
(the claim loop's end: no job is handed after it) ends the parked tasks; a busy one ends after
its job.

It touches the worker's task group of runs only: no tracker, no slots.
"""

from __future__ import annotations

from asyncio import AbstractEventLoop
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

from worker.wake import Wake, running_loop

__all__ = ["Runners"]

#: A job: a coroutine function and its arguments (it is called with the task's cancel scope
#: before them).
Job = tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]

_NAME = f"{__name__}.Runners"  # the tasks' name (anyio would otherwise work one out per spawn)


class _Parked:
    """A task waiting for its next job."""

    __slots__ = ("job", "wake")

    def __init__(self, loop: AbstractEventLoop | None) -> None:
        self.wake = Wake(loop)
        self.job: Job | None = None  # None when woken by close()


class Runners:
    """Runs jobs in parked tasks of a task group, spawning only when none is parked (see the
    module docstring)."""

    __slots__ = ("_closed", "_group", "_loop", "_parked", "spawned")

    def __init__(self, group: TaskGroup) -> None:
        """``group``: where new tasks are spawned (the worker's task group of runs). Made in
        the running loop (the parked tasks' wake-ups are bound to it)."""
        self._group = group
        self._loop = running_loop()
        self._parked: list[_Parked] = []
        self._closed = False
        #: Tasks spawned so far (the pool's size; for the tests and the benchmarks).
        self.spawned = 0

    @property
    def parked(self) -> int:
        """Tasks waiting for a job."""
        return len(self._parked)

    def start(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run ``fn(scope, *args)`` in a parked task, or in a new one when none is parked;
        ``scope`` is the task's cancel scope (see the module docstring)."""
        parked = self._parked
        if parked:
            waiting = parked.pop()  # the last parked: its task is the likeliest still warm
            waiting.job = (fn, args)
            waiting.wake.set()
            return
        self.spawned += 1
        self._group.start_soon(self._serve, fn, args, name=_NAME)

    def close(self) -> None:
        """No more jobs: parked tasks end now, busy ones after their job."""
        self._closed = True
        parked, self._parked = self._parked, []
        for waiting in parked:
            waiting.wake.set()

    async def _serve(self, fn: Callable[..., Awaitable[None]], args: tuple[Any, ...]) -> None:
        job: Job | None = (fn, args)
        waiting: _Parked | None = None  # this task's, a new wake-up each time it parks
        with anyio.CancelScope() as scope:  # every job's (the module docstring)
            while job is not None:
                await job[0](scope, *job[1])
                if self._closed or scope.cancel_called:  # (cancelled: spent, the task ends)
                    return
                if waiting is None:
                    waiting = _Parked(self._loop)
                else:
                    waiting.job, waiting.wake = None, Wake(self._loop)
                self._parked.append(waiting)
                try:
                    await waiting.wake.wait()
                except BaseException:
                    if waiting.job is None:
                        if waiting in self._parked:  # (not after close(), which emptied it)
                            self._parked.remove(waiting)
                        raise
                    # Handed a job as the group was cancelled: it runs, and meets the
                    # cancellation at its first checkpoint, as a task spawned now would.
                    handed = waiting.job
                    await handed[0](scope, *handed[1])
                    raise
                job = waiting.job
