"""The run settings of each role, built once per role, configuration and tracker.

A role's :class:`~worker.run.RunSettings` depend on the ``[worker]`` and ``[tracker]`` sections
and on what the tracker declared (:class:`~tracker_client.capabilities.Capabilities`: the
longest lease a heartbeat keeps, whether writes need idempotency keys). The book keeps them
until one of those changes (a reload, the capabilities read at start). No I/O.
"""

from __future__ import annotations

from pathlib import Path

from tracker_client.capabilities import Capabilities
from tracker_client.protocol import ClaimsMany, ParksClaims, RailParts
from worker.config.models import TrackerConfig, WorkerConfig
from worker.daemon.values import Role
from worker.lease.batch import ReportBatcher
from worker.retry import RetryPolicy, TrackerCalls
from worker.run import RunSettings
from worker.telemetry import NOOP, Telemetry

__all__ = ["SettingsBook"]


class SettingsBook:
    """Run settings by role (see the module docstring)."""

    def __init__(
        self,
        config: WorkerConfig,
        tracker: TrackerConfig,
        workdir_base: Path,
        telemetry: Telemetry = NOOP,
    ) -> None:
        """``workdir_base``: the prepared base of run directories; ``telemetry``: told of every
        tracker call the runs and claims make."""
        self.tracker = tracker
        self.telemetry = telemetry
        self.retry = RetryPolicy(initial_s=tracker.retry_initial_s, max_s=tracker.retry_max_s)
        # Until the tracker answered: no lease ceiling assumed, keys sent.
        self._caps = Capabilities(max_lease_ttl_ms=None)
        self._config, self._workdir_base = config, workdir_base
        self._reports: ReportBatcher | None = None
        self._parts: RailParts | None = None
        #: How the worker's own calls (claims) are retried and keyed (by the capabilities the
        #: tracker declared, once read). Read, never set, outside the book.
        self.calls = TrackerCalls.of(self._caps, self.retry, telemetry)
        #: The rail's ``claim_many`` where it declares it (None until the capabilities are
        #: read): free slots then claim together. Read, never set, outside the book.
        self.claim_many: ClaimsMany | None = None
        #: The rail's ``parked_claim`` where it declares it: an idle worker's probe waits at
        #: the tracker for work (:mod:`worker.daemon.parking`). Read, never set, outside.
        self.parked_claim: ParksClaims | None = None
        self._by_role: dict[str, RunSettings] = {}

    @property
    def workdir_base(self) -> Path:
        """The prepared base of run directories."""
        return self._workdir_base

    def update(
        self,
        *,
        config: WorkerConfig | None = None,
        workdir_base: Path | None = None,
        capabilities: Capabilities | None = None,
        reports: ReportBatcher | None = None,
        parts: RailParts | None = None,
    ) -> None:
        """New claims use these (runs in flight keep their settings). ``reports``: the
        batcher of final reports, and ``parts``: the rail's declared extensions, given with
        the capabilities that allow them."""
        if config is not None:
            self._config = config
        if workdir_base is not None:
            self._workdir_base = workdir_base
        if capabilities is not None:
            self._caps = capabilities
            self._reports = reports
            self._parts = parts
            self.calls = TrackerCalls.of(capabilities, self.retry, self.telemetry)
            self.claim_many = None if parts is None else parts.claim_many
            self.parked_claim = None if parts is None else parts.parked_claim
        self._by_role.clear()

    def lease_ttl_s(self, role: Role) -> float:
        """The role's lease TTL, clamped to the longest lease a heartbeat of the tracker keeps
        (300 s on NullTickets)."""
        ttl = role.config.lease_ttl_s or self._config.lease_ttl_s
        ceiling_ms = self._caps.max_lease_ttl_ms
        return ttl if ceiling_ms is None else min(ttl, ceiling_ms / 1000)

    @property
    def heartbeat_grant_s(self) -> float | None:
        """What a heartbeat of the tracker grants whatever TTL it asks (a plain NullTickets
        heartbeat resets the lease to its 300 s ceiling); None where the TTL asked is kept."""
        ceiling_ms = self._caps.max_lease_ttl_ms
        return None if ceiling_ms is None else ceiling_ms / 1000

    def for_role(self, role: Role) -> RunSettings:
        """The run settings of ``role`` (built once per role and configuration)."""
        name = role.name
        settings = self._by_role.get(name)
        if settings is None:
            settings = self._by_role[name] = RunSettings(
                lease_ttl_s=self.lease_ttl_s(role),
                retry=self.retry,
                report_retry_budget_s=self.tracker.report_retry_budget_s,
                workdir_base=self._workdir_base,
                keep_workdirs=self._config.keep_workdirs,
                report_flush_s=self._config.report_flush_s,
                idempotency_keys=self._caps.answers_can_be_lost,
                telemetry=self.telemetry,
                reports=self._reports,
                heartbeat_grant_s=self.heartbeat_grant_s,
                can_release=self._caps.release,
                parts=self._parts,
            )
        return settings
