"""``backlog-worker task show ID --follow``: stream a task's new events until it finishes.

After ``task show`` has printed the task, each event written after it is printed as it comes
(time, run, kind and a one-line rendering of its data; with ``--json`` one JSON object per line),
until the task is finished (terminal stage, dead-lettered, cancelled, expired); the command then
exits with the code ``submit --wait`` gives that outcome (:func:`~.outcome.outcome_message`).

Where the rail has the ``follow`` extension (the embedded tracker, ``tracker serve``) the events
come from ``follow_task``, a long poll that answers as soon as an event is written; elsewhere
(a plain NullTickets server) the task and its run events are polled every ``--poll-interval``.

It may touch the tracker (reads only: ``follow_task``, ``wait``, events and runs) and the
terminal; what ``task show`` prints first is :mod:`.show`'s.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import click

from tracker_client import calls
from tracker_client.errors import NotFound, Unsupported
from tracker_client.models import Event, Page, Run
from tracker_client.ops_models import WaitResult
from tracker_client.protocol import Tracker
from worker.cli.ops.common import (
    EXIT_OK,
    EXIT_USAGE,
    DurationType,
    OpsContext,
    OpsError,
    escape_controls,
    fmt_when,
)
from worker.cli.ops.outcome import outcome_message

__all__ = [
    "DEFAULT_POLL_S",
    "FOLLOW_SLICE_MS",
    "Follow",
    "follow_events",
    "follow_options",
]

F = TypeVar("F", bound=Callable[..., Any])
Summary = Callable[[str, Any], str]

#: One ``follow_task`` long poll: well under the remote client's read timeout (10 s), so no
#: request is cut short; an idle follower asks again.
FOLLOW_SLICE_MS = 5_000
#: How often ``--follow`` polls a rail without the ``follow`` extension (``--poll-interval``).
DEFAULT_POLL_S = 1.0


def follow_options(func: F) -> F:
    """Add ``--follow`` and ``--poll-interval`` to ``task show``."""
    func = click.option(
        "--poll-interval",
        type=DurationType(),
        default=None,
        metavar="DURATION",
        help=f"With --follow on a rail without the follow extension (plain NullTickets): poll "
        f"the task's events this often. Default: {DEFAULT_POLL_S:g}s.",
    )(func)
    func = click.option(
        "--follow",
        "-f",
        is_flag=True,
        help="Then print each new event as it is written until the task finishes, and exit "
        "with its outcome code (as submit --wait: 0 done, 1 dead-lettered/cancelled/expired). "
        "Woken by the rail (embedded, tracker serve); a plain NullTickets is polled "
        "(--poll-interval). --json: one JSON object per line.",
    )(func)
    return func


async def _long_poll(
    tracker: Tracker, task_id: str, cursor: str
) -> AsyncIterator[tuple[list[Event], bool]]:
    while True:
        answer = await calls.FOLLOW_TASK.call(
            tracker, task_id, after=cursor, timeout_ms=FOLLOW_SLICE_MS
        )
        cursor = answer.next_cursor
        yield answer.events, answer.finished


Fetch = Callable[[str | None], Awaitable[Page[Event]]]


async def _after(fetch: Fetch, after: int) -> list[Event]:
    """Every event ``fetch`` pages through with an id above ``after``."""
    items: list[Event] = []
    cursor = str(after) if after > 0 else None
    while True:
        page = await fetch(cursor)
        items += [e for e in page.items if e.id > after]
        if page.next_cursor is None or not page.items:
            return items
        cursor = str(page.items[-1].id)


@dataclass
class _Polled:
    """New events of a rail without ``follow_task``: the task's events (``task_events``
    extension), else each run's events (a plain NullTickets lists the latest run only)."""

    tracker: Tracker
    task_id: str
    after: int
    per_task: bool = True
    per_run: dict[str, int] = field(default_factory=dict)

    async def new_events(self) -> list[Event]:
        tracker, task_id = self.tracker, self.task_id
        if self.per_task:
            try:
                found = await _after(
                    lambda c: tracker.list_task_events(task_id, limit=1000, cursor=c), self.after
                )
                self.after = max([self.after, *(e.id for e in found)])
                return found
            except Unsupported:
                self.per_task = False
        found = []
        for run in await tracker.list_runs(task_id):
            after = self.per_run.get(run.id, self.after)
            events = await _after(functools.partial(_run_events, tracker, run.id), after)
            self.per_run[run.id] = max([after, *(e.id for e in events)])
            found += events
        return sorted(found, key=lambda e: e.id)


async def _run_events(tracker: Tracker, run_id: str, cursor: str | None) -> Page[Event]:
    return await tracker.list_events(run_id, limit=1000, cursor=cursor)


async def _polling(
    tracker: Tracker, task_id: str, cursor: int, interval_s: float
) -> AsyncIterator[tuple[list[Event], bool]]:
    polled = _Polled(tracker, task_id, cursor)
    while True:
        state = await tracker.wait(task_id, timeout_s=0)  # first: no event before the end is lost
        yield await polled.new_events(), state.finished
        await anyio.sleep(interval_s)


async def follow_events(
    tracker: Tracker, task_id: str, after: int, *, poll_interval_s: float = DEFAULT_POLL_S
) -> AsyncIterator[list[Event]]:
    """Each batch of the task's events with an id above ``after``, as they are written, until
    the task is finished: through ``follow_task`` where the rail lists the ``follow`` extension,
    else by polling every ``poll_interval_s``. ``NotFound`` for an unknown task."""
    if "follow" in (await tracker.capabilities()).extensions:
        batches = _long_poll(tracker, task_id, str(after))
    else:
        batches = _polling(tracker, task_id, after, poll_interval_s)
    async for events, finished in batches:
        if events:
            yield events
        if finished:
            return


@dataclass
class Follow:
    """What ``--follow`` asked for, checked before the tracker is opened."""

    task_id: str
    enabled: bool
    poll_interval_s: float
    summary: Summary

    @classmethod
    def checked(
        cls, task_id: str, follow: bool, poll_interval: float | None, *, summary: Summary
    ) -> Follow:
        """The options, or a usage error naming the ones that do not go together."""
        if poll_interval is not None and not follow:
            raise OpsError("--poll-interval only applies with --follow", EXIT_USAGE)
        if poll_interval is not None and poll_interval <= 0:
            raise OpsError(
                f"--poll-interval must be more than 0, got {poll_interval:g}s", EXIT_USAGE
            )
        interval = DEFAULT_POLL_S if poll_interval is None else poll_interval
        return cls(task_id, follow, interval, summary)

    def interrupted(self) -> str:
        """The line Ctrl-C prints (exit 130)."""
        if self.enabled:
            return f"interrupted; stopped following task {self.task_id} (the task goes on)"
        return "interrupted"

    async def run(
        self, ops: OpsContext, tracker: Tracker, runs: list[Run], seen: list[Event]
    ) -> int:
        """Stream the events after ``seen`` until the task finishes; its outcome's exit code.
        Without ``--follow``: 0 at once."""
        if not self.enabled:
            return EXIT_OK
        attempts = {r.id: r.attempt for r in runs}
        after = max((e.id for e in seen), default=0)
        if not ops.as_json:
            click.echo(f"following task {self.task_id} (Ctrl-C stops)", err=True)
        while True:
            try:
                async for events in follow_events(
                    tracker, self.task_id, after, poll_interval_s=self.poll_interval_s
                ):
                    after = events[-1].id
                    if any(e.run_id is not None and e.run_id not in attempts for e in events):
                        attempts = {r.id: r.attempt for r in await tracker.list_runs(self.task_id)}
                    for event in events:
                        self._print(ops, event, attempts)
                result = await tracker.wait(self.task_id, timeout_s=0)
            except NotFound:
                raise OpsError(f"task {self.task_id!r} is gone (purged?)") from None
            if result.finished:  # else it was requeued since: follow on
                return self._end(ops, result)

    def _print(self, ops: OpsContext, event: Event, attempts: dict[str, int]) -> None:
        if ops.as_json:
            ops.emit_json({"event": event}, compact=True)
            return
        if event.run_id is None:
            run = "-"
        else:
            run = f"#{attempts[event.run_id]}" if event.run_id in attempts else "?"
        summary = self.summary(event.kind, event.data)
        ops.print(f"{fmt_when(event.ts_ms)}  {run}  {event.kind}  {summary}")

    def _end(self, ops: OpsContext, result: WaitResult) -> int:
        code, message = outcome_message(self.task_id, result, None)
        if ops.as_json:
            end = {"finished": True, "outcome": result.outcome, "exit_code": code}
            ops.emit_json({**end, "message": message, "task": result.task}, compact=True)
        elif code == EXIT_OK:
            ops.print(message)
        else:
            click.echo(f"error: {escape_controls(message)}", err=True)
        return code
