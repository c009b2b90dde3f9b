"""Shared pieces of the contract suite: the implementation registry type, capabilities, the fake
clock, pipeline definitions and small helpers that only use the :class:`Tracker` protocol.

Adding an implementation (e.g. the remote client): build a :class:`TrackerImpl` whose ``open`` is
an async context manager ``open(db_path, clock, options) -> Tracker`` and list it in
``tests/remote/contract_impls.py`` as ``IMPLEMENTATIONS = [...]``; ``conftest.py`` picks it up.
Declare only the capabilities the implementation really has; tests that need a missing one are
skipped with a reason naming it.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tracker_client.models import Event, Lease, Run, Task, TaskCreate
from tracker_client.protocol import Tracker

# -- capabilities -------------------------------------------------------------------------------
#: The tracker's time is the injected fake clock (lease expiry, retry delays, deadlines, ages).
CLOCK = "clock"
#: Open options are honoured (max_backlog_depth, role_backlog_depth, max_stale_attempts,
#: idempotency_ttl_s).
OPTIONS = "options"
#: cancel, cancel_all, requeue and maintenance work (not ``Unsupported``).
BACKLOG_OPS = "backlog_ops"
#: ``wait`` and ``wait_for_work`` work.
WAIT = "wait"
#: ``list_runs`` returns every run, runs carry ``error``/``usage``, ``FailResult`` says what
#: happened, ``list_task_events`` works.
RUN_DETAILS = "run_details"
#: Task extensions are honoured: concurrency_key, expires_at_ms/queue_ttl_ms,
#: default_queue_ttl_ms, exponential backoff, max_stale_attempts, fail(retryable=False).
EXTENSIONS = "extensions"
#: Oversized event data is refused with ``ValidationFailed`` (a client may trim it instead).
STRICT_LIMITS = "strict_limits"
#: Two instances opened on the same name share one rail (writes of one wake waiters of the other).
MULTI_INSTANCE = "multi_instance"
#: ``release`` gives the task back at once (a plain NullTickets server: ``released=False``, the
#: lease is left to expire).
RELEASE = "release"
#: The tracker itself refuses definitions that strand tasks (unknown keys, a way out of a
#: terminal state, a role-less working state) and a requeue into a terminal stage.
STRICT_DEFINITIONS = "strict_definitions"

ALL_CAPABILITIES = frozenset(
    {CLOCK, OPTIONS, BACKLOG_OPS, WAIT, RUN_DETAILS, EXTENSIONS, STRICT_LIMITS, MULTI_INSTANCE}
    | {RELEASE, STRICT_DEFINITIONS}
)

#: The capabilities a tracker declares itself (``await tracker.capabilities()``), by the field
#: of :class:`tracker_client.capabilities.Capabilities` that says so. The suite reads them from
#: the tracker, as the worker and the CLI do; the others (``clock``, ``options``,
#: ``multi_instance``) are what the test harness can do with an implementation, declared in its
#: :class:`TrackerImpl`.
DECLARED: dict[str, str] = {
    BACKLOG_OPS: "backlog_ops",
    WAIT: "wait",
    RUN_DETAILS: "run_details",
    EXTENSIONS: "task_extensions",
    STRICT_LIMITS: "strict_limits",
    RELEASE: "release",
    STRICT_DEFINITIONS: "strict_definitions",
}

#: A fresh rail starts at this fake time (epoch ms, 2026-09-21).
START_MS = 1_790_000_000_000


class FakeClock:
    """A mutable epoch-ms clock passed as ``clock=``; tests move time instead of sleeping."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms`` and return the new time."""
        self.now_ms += ms
        return self.now_ms


Opener = Callable[[Path, FakeClock, Mapping[str, Any]], AbstractAsyncContextManager[Tracker]]
#: The ``open_tracker`` fixture: ``await open_tracker(name="rail", **options)``.
OpenTracker = Callable[..., Awaitable[Tracker]]


@dataclass(frozen=True)
class TrackerImpl:
    """One Tracker implementation under contract test.

    ``open(db_path, clock, options)`` opens a tracker whose rail lives in ``db_path`` (a file that
    may not exist yet; the same path means the same rail), using ``clock`` as its time source and
    the embedded-tracker ``options``, and closes it on exit.
    """

    name: str
    open: Opener
    capabilities: frozenset[str] = ALL_CAPABILITIES
    marks: tuple[pytest.MarkDecorator, ...] = field(default_factory=tuple)


# -- pipeline definitions -----------------------------------------------------------------------
_names = itertools.count(1)


def simple_pipeline(role: str = "coder", **extra: Any) -> dict[str, Any]:
    """todo (role) --complete--> done (terminal), plus a terminal ``failed`` dead-letter stage."""
    return {
        "initial": "todo",
        "states": {
            "todo": {"agent_role": role},
            "done": {"terminal": True},
            "failed": {"terminal": True},
        },
        "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
        **extra,
    }


def review_pipeline() -> dict[str, Any]:
    """todo (coder) -> review (reviewer) -> done (terminal, but with a role).

    ``parked`` is a non-terminal dead-letter stage with a role; ``failed`` a terminal one.
    """
    return {
        "initial": "todo",
        "states": {
            "todo": {"agent_role": "coder", "description": "write the code"},
            "review": {"agent_role": "reviewer"},
            "done": {"terminal": True, "agent_role": "archiver"},
            "parked": {"agent_role": "triager"},
            "failed": {"terminal": True},
        },
        "transitions": [
            {"from": "todo", "to": "review", "trigger": "complete", "instructions": "review it"},
            {"from": "review", "to": "done", "trigger": "approve"},
            {"from": "review", "to": "todo", "trigger": "reject", "required_gates": ["tests"]},
            {"from": "parked", "to": "todo", "trigger": "retry"},
        ],
    }


async def make_pipeline(
    tracker: Tracker, definition: Mapping[str, Any] | None = None, *, name: str | None = None
) -> str:
    """Create a pipeline with a unique name (default: :func:`simple_pipeline`)."""
    return await tracker.create_pipeline(
        name or f"pipeline-{next(_names)}", definition or simple_pipeline()
    )


def new_task(pipeline_id: str, title: str = "task", **fields: Any) -> TaskCreate:
    """A ``TaskCreate`` with defaults."""
    return TaskCreate(pipeline_id=pipeline_id, title=title, **fields)


async def claim(
    tracker: Tracker, role: str = "coder", agent: str = "agent-1", ttl_ms: int = 60_000, **kw: Any
) -> Lease:
    """Claim and insist on getting a lease."""
    lease = await tracker.claim(agent, role, ttl_ms, **kw)
    assert lease is not None, f"expected work for role {role!r} (agent {agent!r})"
    return lease


async def finish_all(tracker: Tracker, role: str = "coder", agent: str = "a") -> None:
    """Claim ``role``'s work ten leases at a time and complete each batch with one
    ``finish_many`` until none is left, insisting every item was finished."""
    from tracker_client.contract.batch_models import FinishItem, FinishResult

    while leases := await tracker.claim_many(agent, role, 60_000, 10):
        items = [
            FinishItem(
                lease=x, transition={"trigger": "complete"}, idempotency_key=f"f-{x.lease_id}"
            )
            for x in leases
        ]
        done = await tracker.finish_many(items)
        assert all(isinstance(r, FinishResult) for r in done), done


async def claim_ids(tracker: Tracker, role: str = "coder", agent: str = "agent-1") -> list[str]:
    """Claim until there is no more work; the task ids in claim order (leases kept)."""
    ids = []
    while (lease := await tracker.claim(agent, role, 60_000)) is not None:
        ids.append(lease.task.id)
    return ids


async def all_tasks(tracker: Tracker, *, limit: int = 1000, **filters: Any) -> list[Task]:
    """Every task, following ``next_cursor``."""
    items: list[Task] = []
    cursor = None
    while True:
        page = await tracker.list_tasks(limit=limit, cursor=cursor, **filters)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor


async def run_events(tracker: Tracker, run_id: str) -> list[Event]:
    """Every event of a run."""
    items: list[Event] = []
    cursor = None
    while True:
        page = await tracker.list_events(run_id, limit=1000, cursor=cursor)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor


async def task_events(tracker: Tracker, task_id: str) -> list[Event]:
    """Every event of a task (all runs and task-level events)."""
    items: list[Event] = []
    cursor = None
    while True:
        page = await tracker.list_task_events(task_id, limit=1000, cursor=cursor)
        items.extend(page.items)
        if page.next_cursor is None:
            return items
        cursor = page.next_cursor


def kinds(events: Iterable[Event]) -> list[str]:
    """The kinds of ``events``, in order."""
    return [e.kind for e in events]


def only(events: Iterable[Event], kind: str) -> Event:
    """The single event of ``kind``."""
    events = list(events)
    found = [e for e in events if e.kind == kind]
    assert len(found) == 1, f"expected one {kind!r} event, got {kinds(events)}"
    return found[0]


async def runs_of(tracker: Tracker, task_id: str) -> list[Run]:
    """A task's runs by attempt."""
    return sorted(await tracker.list_runs(task_id), key=lambda r: r.attempt)


async def check_withdraw_takes_only_untouched(
    tracker: Any, leases: list[Lease], **claim_options: Any
) -> None:
    """Withdraw (a lease claimed ahead and never handed out) erases a run, so it takes only a
    lease as claimed and untouched: of three leases of role ``coder`` for agent ``a``, one
    heartbeated and one whose run recorded an event stay (a lease token cannot erase a run
    that ran); the untouched one goes, its attempt count back (``claim_options``: the
    rail's claim_many's extra arguments, an idempotency key)."""
    beat, noted, untouched = leases
    await tracker.heartbeat(beat, lease_ttl_ms=120_000)  # later than claimed, whatever the clock
    await tracker.add_event(noted, "progress", {"step": 1})
    assert await tracker.withdraw(beat) is False
    assert await tracker.withdraw(noted) is False
    assert await tracker.withdraw(untouched) is True
    assert [r.status for r in await tracker.list_runs(beat.task.id)] == ["running"]
    assert [r.status for r in await tracker.list_runs(noted.task.id)] == ["running"]
    assert await tracker.list_runs(untouched.task.id) == []
    again = await tracker.claim_many("b", "coder", 60_000, 3, **claim_options)
    assert [(x.task.id, x.run.attempt) for x in again] == [(untouched.task.id, 1)]


async def check_stale_kept_leases_are_withdrawn(
    tracker: Any, kept: set[str], **claim_options: Any
) -> None:
    """Kept leases (claimed ahead, task ids ``kept``) all too old: the next ``claim_many`` of
    agent ``a`` withdraws them and claims afresh; the withdrawn tasks keep no run, the new
    leases are fresh runs of their first attempt (``claim_options``: an idempotency key)."""
    tracker._ahead.max_age_s = 0.0  # every kept lease is now too old
    nxt = await tracker.claim_many("a", "coder", 60_000, 3, **claim_options)
    assert len(nxt) == 3
    for task_id in kept - {x.task.id for x in nxt}:  # withdrawn, claimable again
        assert await tracker.list_runs(task_id) == []
    # the new leases are fresh runs of their first attempt (the withdrawn tasks come first
    # again: best first)
    for lease in nxt:
        runs = await tracker.list_runs(lease.task.id)
        assert [(r.status, r.attempt) for r in runs] == [("running", 1)]
        assert runs[0].id == lease.run.id


async def check_withdrawn_without_a_trace(other: Any, kept: set[str], **claim_options: Any) -> None:
    """The tasks ``kept`` (leases claimed ahead, withdrawn when their rail closed), read by
    another instance ``other``: no run of them stays, nothing is counted, and they are
    claimable again at once, by anyone, as their first attempt (``claim_options``: an
    idempotency key)."""
    for task_id in kept:
        detail = await other.get_task(task_id)
        assert detail.latest_run is None
        assert detail.stale_streak == 0 and detail.dead_letter_reason is None
        assert await other.list_runs(task_id) == []
    again = await other.claim_many("b", "coder", 60_000, 6, **claim_options)
    assert {x.task.id for x in again} == kept
    assert {x.run.attempt for x in again} == {1}
