"""The worker daemon's value types: its roles, life-cycle states, counters, claims and signals.

Values only; they may touch the run's result type (counted by :class:`WorkerStats`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

import anyio

from plugins.api import Executor, SupportsLeftovers
from worker.config.models import RoleConfig
from worker.run import RunResult

__all__ = ["Claim", "Role", "Signals", "WorkerState", "WorkerStats"]


class WorkerState(enum.Enum):
    """Lifecycle of a :class:`~worker.daemon.Worker`."""

    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True, eq=False)
class Role:
    """A role this worker serves, with its executor built from the role's options."""

    config: RoleConfig
    executor: Executor
    #: The role name claims are made for (``config.name``, read once: a field of the
    #: configuration's model costs ~400 instructions a read, and each run reads it).
    name: str = field(init=False, compare=False)
    #: The executor when it declares leftovers (read once: a protocol check costs ~7 us, and
    #: :meth:`refusal` is asked before every claim).
    _leftovers: SupportsLeftovers | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        executor = self.executor
        found = executor if isinstance(executor, SupportsLeftovers) else None
        object.__setattr__(self, "_leftovers", found)
        object.__setattr__(self, "name", self.config.name)

    def leftovers(self) -> tuple[int, int] | None:
        """``(running, cap)`` of what the executor's cancelled runs left running (the python
        executor's abandoned threads), or None for an executor that leaves nothing behind."""
        found = self._leftovers
        return None if found is None else found.leftovers()

    def refusal(self) -> str | None:
        """Why no run of this role may start now (its leftovers are at their cap), or None."""
        found = self._leftovers
        return None if found is None else found.refusal()


@dataclass(slots=True)
class WorkerStats:
    """Live counters, for logs, ``STATUS=`` and tests."""

    claimed: int = 0
    transitioned: int = 0
    failed: int = 0
    #: Of the failed runs, those whose task was dead-lettered by that fail.
    dead_lettered: int = 0
    #: Runs ended by the worker's shutdown and given back (no attempt spent): not failures.
    released: int = 0
    lost: int = 0
    in_flight: int = 0
    last_error: str | None = None
    by_role: dict[str, int] = field(default_factory=dict)

    def count(self, result: RunResult) -> None:
        """Count how a run ended."""
        if result.status == "transitioned":
            self.transitioned += 1
        elif result.status == "failed":
            self.failed += 1
            self.dead_lettered += result.dead_lettered
        elif result.status == "released":
            self.released += 1
        else:
            self.lost += 1
            self.last_error = f"{result.status}: {result.detail}"

    def summary(self) -> str:
        """``5 claimed, 3 transitioned, 2 failed (1 dead-lettered), 0 released, 0 lost``."""
        return (
            f"{self.claimed} claimed, {self.transitioned} transitioned, {self.failed} failed "
            f"({self.dead_lettered} dead-lettered), {self.released} released, {self.lost} lost"
        )


class Claim(NamedTuple):
    """One claim answered: the role it was for and when it was sent (one record for all the
    leases it brought, not one per lease)."""

    role: Role
    sent_at: float
    #: Wall-clock ns when the claim was sent and answered (for the run's telemetry).
    started_ns: int = 0
    ended_ns: int = 0


class Signals(NamedTuple):
    """The worker's stop signals (set by ``Worker.stop``; never re-created)."""

    #: No claim is sent after it.
    stopping: anyio.Event
    #: Executors see it as ``ctx.shutting_down``.
    shutdown: anyio.Event
    #: A second stop: in-flight runs get no more grace, claims at the tracker are abandoned.
    skip_grace: anyio.Event
