"""The worker's entry in the rail's worker list (extension ``workers``): register, refresh, bye.

:class:`Presence` registers the worker at start (``register_worker``: id, host, pid, version,
roles, slots, agent id, start time, the runs it holds) and repeats that one upsert every
``lost_after_s / 4`` (15 s by default): the rail shows the worker ``lost`` once it has been
silent for ``lost_after_s``. On a clean shutdown (:meth:`Presence.goodbye`, after the last run
ended) it sends the same upsert with ``stopping``: the worker is then ``stopped``.

It never stands in the worker's way: a refresh that fails or hangs is given up after a bounded
time, logged once at WARNING for the whole outage (and once at INFO when it works again), and
tried again at the next tick; the goodbye is bounded to a few seconds. On a rail without the
extension (a plain NullTickets server), or with ``[worker] presence = false``, it does nothing.

It may touch the tracker (``register_worker`` only) and reads the worker's roles, slots, agent id
and in-flight runs; nothing else.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio

from tracker_client.capabilities import Capabilities
from tracker_client.protocol import RegistersWorkers
from tracker_client.version import package_version
from worker.config.models import WorkerConfig
from worker.daemon.claimer import Claimer
from worker.daemon.values import Role

__all__ = ["EXTENSION", "GOODBYE_TIMEOUT_S", "Presence", "PresenceSource", "worker_version"]

log = logging.getLogger("backlog_worker.presence")

#: The rail extension that carries the worker list.
EXTENSION = "workers"
#: The longest a goodbye may hold up the end of a shutdown.
GOODBYE_TIMEOUT_S = 5.0


class PresenceSource(Protocol):
    """What a registration is read from (the :class:`~worker.daemon.worker.Worker`)."""

    @property
    def roles(self) -> tuple[Role, ...]:
        """The roles new claims are made for."""
        ...

    @property
    def config(self) -> WorkerConfig:
        """The running ``[worker]`` section (slots, agent id, ``lost_after_s``)."""
        ...

    @property
    def claimer(self) -> Claimer:
        """The claim loop, whose ``runs`` are the runs in flight."""
        ...


#: The installed backlog-worker's version (``unknown`` when not installed as a package).
worker_version = package_version


class Presence:
    """Keeps one worker's registration fresh in the rail (see the module docstring)."""

    def __init__(
        self,
        tracker: RegistersWorkers,
        source: PresenceSource,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: wall time in seconds (the start time sent; ``last seen`` is the rail's)."""
        self._tracker = tracker
        self._source = source
        self.host = socket.gethostname() or "localhost"
        self.pid = os.getpid()
        #: This process's id in the worker list: host, pid and a random suffix (a pid is
        #: reused across restarts and hosts; the id never is).
        self.worker_id = f"{self.host}-{self.pid}-{secrets.token_hex(3)}"
        self.started_at_ms = int(clock() * 1000)
        self._version = worker_version()
        self._rail: RegistersWorkers | None = None
        self._failing = False

    @property
    def active(self) -> bool:
        """Whether the worker is registered on this rail (the extension is there, not off)."""
        return self._rail is not None

    def interval_s(self) -> float:
        """Seconds between refreshes: a quarter of ``lost_after_s`` (three may be missed)."""
        return self._source.config.lost_after_s / 4

    async def run(self, capabilities: Capabilities) -> None:
        """Register, then refresh every :meth:`interval_s` until cancelled; returns at once on
        a rail without the extension or with presence off."""
        tracker = self._tracker
        if not self._source.config.presence or EXTENSION not in capabilities.extensions:
            return
        self._rail = tracker
        log.info(
            "registering as %s in the rail's worker list (refresh every %gs, lost after %gs)",
            self.worker_id,
            self.interval_s(),
            self._source.config.lost_after_s,
            extra={"action": "presence_start", "worker_id": self.worker_id},
        )
        while True:
            await self.refresh()
            await anyio.sleep(self.interval_s())

    async def refresh(self, *, stopping: bool = False, timeout_s: float | None = None) -> bool:
        """One upsert of the registration; True when the rail took it. Never raises (but
        cancellation): a failure is logged once per outage and the next tick tries again."""
        rail = self._rail
        if rail is None:
            return False
        limit = timeout_s if timeout_s is not None else max(self.interval_s(), 1.0)
        try:
            with anyio.fail_after(limit):
                await rail.register_worker(self.worker_id, **self.body(stopping=stopping))
        except Exception as exc:  # any failure: the worker goes on without its entry
            if not self._failing:
                self._failing = True
                why = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
                log.warning(
                    "could not refresh this worker in the rail's worker list (%s); "
                    "retrying every %gs",
                    why or type(exc).__name__,
                    self.interval_s(),
                    extra={"action": "presence_failed", "worker_id": self.worker_id},
                )
            return False
        if self._failing:
            self._failing = False
            log.info(
                "this worker is in the rail's worker list again",
                extra={"action": "presence_recovered", "worker_id": self.worker_id},
            )
        return True

    def body(self, *, stopping: bool = False) -> dict[str, Any]:
        """The registration as sent (:class:`~tracker_client.observe_models.WorkerRegister`)."""
        source = self._source
        config = source.config
        return {
            "host": self.host,
            "pid": self.pid,
            "version": self._version,
            "roles": [role.name for role in source.roles],
            "slots": config.concurrency,
            "agent_id": config.agent_id,
            "started_at_ms": self.started_at_ms,
            "lost_after_ms": max(100, int(config.lost_after_s * 1000)),
            "stopping": stopping,
            "run_ids": sorted(run.lease.run_id for run in source.claimer.runs),
        }

    async def goodbye(self) -> None:
        """Say the worker stopped (after its last run ended): shown ``stopped``, not ``lost``.
        Bounded by :data:`GOODBYE_TIMEOUT_S` and shielded from cancellation."""
        if self._rail is None:
            return
        with anyio.CancelScope(shield=True):
            if await self.refresh(stopping=True, timeout_s=GOODBYE_TIMEOUT_S):
                log.info(
                    "marked %s stopped in the rail's worker list",
                    self.worker_id,
                    extra={"action": "presence_stopped", "worker_id": self.worker_id},
                )
