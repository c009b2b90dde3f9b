"""The runner's side of one run's :class:`~plugins.api.ExecutionContext`: what it keeps for the
worker, apart from what the executor sees.

An executor sees ``ctx.report``, ``ctx.flush``, ``ctx.workdir`` and the agent calls. Behind them
the runner (the worker's :class:`~worker.run.task.TaskRun`, or :class:`plugins.testing.
ExecutorHarness`) keeps a :class:`ContextHooks`, builds the context with it and talks to it
directly: the report buffer (batched by a :class:`ReportPolicy`, flushed on its interval by the
runner, its last events taken out to ride with the final report), the working directory (made
on the executor's first use and held by a lock while the run lives; the runner removes it and
lets it go), and the :class:`ContextSink` where reports, artifacts and agent calls go. The
context holds it privately; the runner never reads the context's private members, and the
executor never sees these hooks.

It may touch the run's working directory (create, lock through :mod:`plugins.rundir_lock`) and
the sink it is given; it imports the rail's data models only.
"""

from __future__ import annotations

import math
import os
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from plugins.rundir_lock import hold_rundir
from tracker_client.models import ArtifactCreate

if TYPE_CHECKING:
    from plugins.api import Outcome

__all__ = ["ContextHooks", "ContextSink", "ReportPolicy", "check_cost"]

#: The key of a run's ``usage`` that carries the cost reported with ``ctx.report_cost``.
COST_KEY = "cost"


def check_cost(usd: Any, tokens: Any) -> tuple[float, int]:
    """``report_cost``'s figures checked: ``usd`` a finite number >= 0, ``tokens`` a whole
    number >= 0; ``ValueError`` naming the bad one otherwise."""
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd):
        raise ValueError(f"ctx.report_cost: usd must be a number of US dollars, got {usd!r}")
    if usd < 0:
        raise ValueError(f"ctx.report_cost: usd must be >= 0, got {usd!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise ValueError(f"ctx.report_cost: tokens must be a whole number, got {tokens!r}")
    if tokens < 0:
        raise ValueError(f"ctx.report_cost: tokens must be >= 0, got {tokens!r}")
    return float(usd), tokens


class ContextSink(Protocol):
    """Where a context's reports and artifacts go: the tracker in a worker, a list in tests."""

    async def emit_events(self, events: list[tuple[str, Any]]) -> None:
        """Write events in order."""

    async def emit_artifact(self, artifact: ArtifactCreate) -> str:
        """Record one artifact; returns its id."""


@dataclass(frozen=True, slots=True)
class ReportPolicy:
    """How ``report`` batches: flush after ``flush_interval_s``, ``max_events`` or ``max_bytes``.

    Consecutive buffered events of one kind are merged into one event ``{"batch": [...]}``, so
    a chatty executor costs a few tracker writes per interval, not one per line. The runner
    (the worker, the test harness) also flushes every ``flush_interval_s``, so the last events
    of an executor that goes quiet are not held until its next report.
    """

    flush_interval_s: float = 1.0
    max_events: int = 200
    max_bytes: int = 32_768
    max_event_bytes: int = 16_384


def _approx_size(data: Any) -> int:
    if isinstance(data, str | bytes):
        return len(data) + 2
    if isinstance(data, Mapping):
        return sum(len(str(k)) + _approx_size(v) + 4 for k, v in data.items()) + 2
    if isinstance(data, list | tuple):
        return sum(_approx_size(v) + 1 for v in data) + 2
    return 16


class ContextHooks:
    """One run's report buffer, working directory and sink, kept by the runner (see the
    module docstring). Build one per run and hand it to the context as ``hooks``."""

    def __init__(
        self,
        sink: ContextSink,
        workdir: Path | str,
        policy: ReportPolicy | None = None,
    ) -> None:
        """``workdir``: the run's directory, made only when the executor first uses it."""
        #: Where reports, artifacts (and agent calls, when it is an ``AgentSink``) go.
        self.sink = sink
        #: How reports are batched.
        self.policy = policy or ReportPolicy()
        self._workdir: Path | str = workdir  # made a Path on first use (pathlib is slow)
        #: Whether the working directory was used, so exists (the worker removes it after).
        #: Set on first use (mkdir with exist_ok); a field, not a property, as the worker reads
        #: it after every run (a property is a Python call per read on CPython 3.11).
        self.workdir_created = False
        self._workdir_hold: Callable[[], object] | None = None  # closes its lock (a finalizer)
        self._buffer: list[tuple[str, Any]] = []
        self._buffered_bytes = 0
        self._last_flush = time.monotonic()
        self._lock: anyio.Lock | None = None  # made by the first flush that writes
        self._cost: tuple[float, int] | None = None  # (USD, tokens) reported; None: none

    # -- cost (docs/operate/budgets.md) ---------------------------------------------------------
    def add_cost(self, usd: float, tokens: int) -> None:
        """Add checked figures (:func:`check_cost`) to the run's reported cost."""
        total_usd, total_tokens = self._cost or (0.0, 0)
        self._cost = (total_usd + usd, total_tokens + tokens)

    @property
    def cost(self) -> tuple[float, int] | None:
        """The run's reported cost so far (USD, tokens); None when nothing was reported."""
        return self._cost

    def with_cost(self, outcome: Outcome) -> Outcome:
        """``outcome`` with the run's reported cost in its ``usage`` as ``{"cost": {"usd",
        "tokens"}}``, the form the rail sums against a task's budgets (unchanged when nothing
        was reported). A ``usage`` that is not an object is kept under ``"usage"``."""
        if self._cost is None:
            return outcome
        usd, tokens = self._cost
        usage = outcome.usage
        base = (
            dict(usage) if isinstance(usage, Mapping) else {} if usage is None else {"usage": usage}
        )
        base[COST_KEY] = {"usd": round(usd, 9), "tokens": tokens}
        return replace(outcome, usage=base)

    # -- the working directory ------------------------------------------------------------------
    def workdir(self) -> Path:
        """The run's working directory, created (and held) on the first call."""
        workdir = self._workdir
        if not isinstance(workdir, Path):
            workdir = self._workdir = Path(workdir)
        if not self.workdir_created:
            # One mkdir: cheap enough for the loop, and skipped entirely by executors that never
            # ask (most of the per-task cost of a no-op run was creating and removing it).
            workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.workdir_created = True
            # held while the run lives, so a worker's start-up sweep leaves it alone
            fd = hold_rundir(str(workdir))
            if fd is not None:
                self._workdir_hold = weakref.finalize(self, os.close, fd)
        return workdir

    def release_workdir(self) -> None:
        """The working directory is removed (or kept on purpose): stop holding it (idempotent;
        also done when the hooks are collected)."""
        if self._workdir_hold is not None:
            self._workdir_hold()

    # -- reports --------------------------------------------------------------------------------
    @property
    def has_buffered_reports(self) -> bool:
        """Whether reports are waiting for the next flush."""
        return bool(self._buffer)

    def _flushing(self) -> bool:
        """Whether a flush is writing now."""
        return self._lock is not None and self._lock.locked()

    async def report(self, kind: str, data: Any, *, flush: bool) -> None:
        """Buffer one event; flush when asked or when the policy says the buffer is due."""
        self._buffer.append((kind, {} if data is None else data))
        self._buffered_bytes += _approx_size(data)
        policy = self.policy
        if (
            flush
            or len(self._buffer) >= policy.max_events
            or self._buffered_bytes >= policy.max_bytes
            or time.monotonic() - self._last_flush >= policy.flush_interval_s
        ):
            await self.flush()

    async def flush(self) -> None:
        """Write buffered events now (merging runs of one kind). Safe to call concurrently."""
        if not self._buffer and not self._flushing():
            return  # nothing to write and no flush in flight to wait for
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            events, self._buffer = self._buffer, []
            self._buffered_bytes = 0
            self._last_flush = time.monotonic()
            if events:
                await self.sink.emit_events(self._coalesce(events))

    def take_reports(self) -> list[tuple[str, Any]] | None:
        """The buffered events, merged as :meth:`flush` writes them, taken out of the buffer
        for the caller to write (the worker sends a run's last events with its final report,
        one request). None while a flush is in flight: then :meth:`flush` is the way."""
        if self._flushing():
            return None
        events, self._buffer = self._buffer, []
        self._buffered_bytes = 0
        self._last_flush = time.monotonic()
        return self._coalesce(events) if events else []

    def _coalesce(self, events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        run_kind: str | None = None
        run_items: list[Any] = []
        run_bytes = 0
        max_event_bytes = self.policy.max_event_bytes

        def close_run() -> None:
            if run_kind is None:
                return
            if len(run_items) == 1:
                out.append((run_kind, run_items[0]))
            else:
                out.append((run_kind, {"batch": list(run_items)}))

        for kind, data in events:
            size = _approx_size(data)
            if kind != run_kind or run_bytes + size > max_event_bytes:
                close_run()
                run_kind, run_items, run_bytes = kind, [], 0
            run_items.append(data)
            run_bytes += size
        close_run()
        return out
