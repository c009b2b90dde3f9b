"""The storage a rail runs over: the :class:`Engine` protocol, and the wake-ups it shares.

:class:`~tracker_client.rules.rail.Rail` holds every operation of the rail and runs the rules
of this package through an engine it receives at construction: the SQLite engine
(:class:`tracker_client.embedded.engine.SqliteEngine`) or the PostgreSQL one
(:class:`tracker_client.postgres.engine.PgEngine`). An engine runs a write transaction and a
read transaction (handing the rules its connection), notices changes made by other processes
or hosts (:meth:`Engine.watch`, :meth:`Engine.follow`), names its database and closes it. The
statements the rules run by name are the engine's own (:mod:`.statements`).

What wakes whom is the rail's rule, the same on every engine: a write wakes this instance's
waiters (``wait``, ``wait_for_work``) unless it is one of :data:`QUIET_WRITES` or a maintenance
pass that changed nothing claimable (:func:`wakes_waiters`); every write wakes this instance's
followers of a task's events. :class:`Changes` holds those two in-process wake-ups; an engine
sets them too when another process's write arrives (a NOTIFY on PostgreSQL).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio

from tracker_client.rules.statements import Statements

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "QUIET_WRITES",
    "Changes",
    "Clock",
    "Engine",
    "Watch",
    "wakes_waiters",
    "wall_ms",
]

R = TypeVar("R")
#: The rail's clock: epoch milliseconds (a test passes a fake one).
Clock = Callable[[], int]


def wall_ms() -> int:
    """The wall clock in epoch milliseconds (the rail's default :data:`Clock`)."""
    return time.time_ns() // 1_000_000


#: Writes that never make work claimable nor revoke a lease: they do not wake waiters.
QUIET_WRITES = frozenset(
    {"claim", "heartbeat", "add_event", "add_artifact", "store_put", "store_delete"}
    | {"store_delete_namespace", "purge", "vacuum"}
    | {"ingest_traces", "ingest_trace_blob"}
    | {"checkpoint", "claim_many"}
    | {"register_worker", "forget_worker"}
)


def wakes_waiters(where: str, result: object) -> bool:
    """Whether the committed write ``where`` (answering ``result``) wakes waiters: not one of
    :data:`QUIET_WRITES`, nor a maintenance pass that changed nothing claimable."""
    if where in QUIET_WRITES:
        return False
    if where != "maintenance":  # the one write answering a report (ops models stay cold)
        return True
    from tracker_client.maintenance_models import MaintenanceReport

    return not (
        isinstance(result, MaintenanceReport)
        and not (result.expired_leases or result.expired_tasks or result.crash_looped)
    )


class Changes:
    """This instance's in-process wake-ups: the waiters' event (set by a write that
    :func:`wakes_waiters`) and the followers' event (set by every write), each replaced by a
    fresh one once set, and how many wait on each (no one waiting: nothing is set).

    ``seq`` counts the waiters' wake-ups whether anyone waits or not: the mark
    ``wait_for_work`` answers, so a caller passing it back (``since``) learns of a change that
    came while it was not waiting (see :meth:`~tracker_client.rules.rail.Rail.wait_for_work`)."""

    __slots__ = ("changed", "followers", "seq", "waiters", "written")

    def __init__(self) -> None:
        self.changed = anyio.Event()
        self.seq = 0
        self.waiters = 0
        self.written = anyio.Event()  # set by every write while someone follows a task
        self.followers = 0

    def notify(self) -> None:
        """Wake this instance's waiters: something may have become claimable or revoked."""
        self.seq += 1
        if self.waiters:
            event, self.changed = self.changed, anyio.Event()
            event.set()

    def wake_followers(self) -> None:
        """Wake this instance's followers: any write may be an event or a state change of theirs."""
        if self.followers:
            event, self.written = self.written, anyio.Event()
            event.set()


class Watch(Protocol):
    """One waiter's look at the engine's changes: :meth:`stamp` inside the read that found
    nothing to answer, then :meth:`sleep` until something may have changed since."""

    def stamp(self) -> None:
        """Note the engine's change marker (called inside the read transaction)."""

    async def sleep(self, event: anyio.Event, limit_s: float) -> None:
        """Until ``event`` is set (a write of this instance), a change of another process or
        host since :meth:`stamp`, or ``limit_s`` passed (whichever first; may return early)."""


class Engine(Protocol):
    """The storage interface of :class:`~tracker_client.rules.rail.Rail` (see the module)."""

    @property
    def statements(self) -> Statements:
        """The engine's named statements (``sql/*.sql`` beside it)."""

    @property
    def changes(self) -> Changes:
        """The in-process wake-ups the engine also sets for other processes' writes."""

    @property
    def path(self) -> str:
        """What the engine's database is (a file, or a URL without its password)."""

    async def write(
        self, where: str, job: Callable[[sqlite3.Connection], R], committed: Callable[[], None]
    ) -> R:
        """Run ``job`` in one write transaction of its own (``where``: the operation, which
        errors name); ``committed()`` once the commit is done. ``job`` may run again after a
        rollback that was not its own: it is a function of the database state."""

    async def read(self, where: str, job: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``job`` in one read transaction (its reads agree with each other)."""

    async def watch(self, wait_s: float | None) -> Watch:
        """A look for a waiter of ``wait``/``wait_for_work`` (``wait_s``: how long a ``wait``
        may wait; None for ``wait_for_work``)."""

    async def follow(self, wait_s: float) -> Watch:
        """A look for a follower of a task's events, who waits at most ``wait_s``."""

    async def aclose(self) -> None:
        """Close the database and everything the engine runs for it. Idempotent."""
