"""What the worker tells its metrics and traces: the hooks, and the no-op that costs nothing.

The daemon calls a :class:`Telemetry` at a handful of points (a claim answered or failed, a
tracker call made, a run and its phases, the worker's own slots); the metrics
(:mod:`worker.telemetry.metrics`, ``[metrics]``) and the traces (:mod:`worker.telemetry.tracing`,
``[tracing]``, the ``otel`` extra) are implementations of it, and :func:`build` picks them from
the configuration. With both off it is :data:`NOOP`: nothing is imported, every hook is an empty
method, and the hot paths skip even the timing when :attr:`Telemetry.enabled` is False.

Times are wall-clock nanoseconds (``time.time_ns()``), which is what spans need and what a
duration can be read from.

It may touch nothing itself: no I/O, no tracker; an implementation's :meth:`Telemetry.serve`
runs in the worker's task group (a metrics listener, an exporter's flushing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from tracker_client.models import Lease
    from tracker_client.protocol import Tracker

__all__ = ["NOOP", "RunEnd", "RunTelemetry", "Telemetry", "WorkerView"]


class RunEnd(Protocol):
    """How a run ended, as the telemetry reads it (:class:`worker.run.settings.RunResult` is
    one; typed here so the telemetry doesn't import the runs it observes)."""

    @property
    def status(self) -> str:
        """``transitioned``, ``failed``, ``released``, ``lost``, ``conflict``, ``report_failed``."""
        ...

    @property
    def detail(self) -> str:
        """A short code (a lost lease's reason)."""
        ...

    @property
    def dead_lettered(self) -> bool:
        """A failed run's task was dead-lettered."""
        ...


class WorkerView(NamedTuple):
    """What a telemetry may read of the running worker, at any time (callbacks, no copies)."""

    tracker: Tracker
    #: ``(busy, total)`` slots now.
    slots: Callable[[], tuple[int, int]]
    #: The roles new claims are made for now (a reload may change them).
    roles: Callable[[], Sequence[str]]
    agent_id: str
    #: Role -> threads of its cancelled runs still running (roles whose executor leaves any).
    abandoned_threads: Callable[[], Mapping[str, int]] = dict


class RunTelemetry:
    """One run's telemetry, from its claim to its final report; the no-op base.

    Used as ``with obs: ...`` around the whole run (a trace makes the run's span current, so
    tracker calls made inside become its children), :meth:`phase` around the executor and the
    report, :meth:`finished` once with how the run ended.
    """

    #: The W3C ``traceparent`` of the run's span, handed to the executor (the ``TRACEPARENT``
    #: environment of a child process, ``ctx.traceparent`` for a Python executor); None when
    #: not tracing.
    traceparent: str | None = None

    def __enter__(self) -> RunTelemetry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Around one phase of the run: ``executor``, ``report``."""
        yield

    def finished(self, result: RunEnd, *, duration_ns: int) -> None:
        """The run ended (``result.status``: transitioned, failed, released, lost, ...)."""

    def within(self) -> AbstractContextManager[None]:
        """Around work done for this run in another task (the keeper's heartbeats and report
        flushes): a trace makes the run current there too, so those calls become its children."""
        return _NO_CONTEXT


_NO_CONTEXT: AbstractContextManager[None] = nullcontext()
_NO_RUN = RunTelemetry()


class Telemetry:
    """The worker's hooks (see the module docstring); this base does nothing."""

    #: False: the daemon skips the timing around tracker calls altogether.
    enabled: bool = False

    def claim_answered(self, role: str, *, found: bool, started_ns: int, ended_ns: int) -> None:
        """A claim for ``role`` was answered, with a task (``found``) or without."""

    def claim_failed(self, role: str, error: BaseException) -> None:
        """A claim for ``role`` failed for good (after its retries)."""

    def tracker_call(
        self, action: str, *, started_ns: int, ended_ns: int, error: BaseException | None
    ) -> None:
        """One attempt of a tracker call (``heartbeat``, ``add_event``, ``transition``, ``fail``,
        ``release``, ``add_artifact``, ``claim``), successful when ``error`` is None."""

    def run(
        self, lease: Lease, role: str, *, claim_started_ns: int, claim_ended_ns: int
    ) -> RunTelemetry:
        """The telemetry of the run ``lease`` starts (claimed between the two times)."""
        return _NO_RUN

    def attach(self, view: WorkerView) -> None:
        """The running worker, readable from now on (slots, roles, its tracker)."""

    async def serve(self) -> None:
        """Background work for the worker's life (a listener, an exporter); returns at once
        when there is none. Cancelled when the worker stops."""

    async def aclose(self) -> None:
        """Flush what is buffered (spans) before the process exits."""


#: The telemetry of a worker with metrics and tracing off.
NOOP = Telemetry()


class FanOut(Telemetry):
    """Several telemetries as one (metrics and tracing both on)."""

    def __init__(self, parts: Sequence[Telemetry]) -> None:
        """Call each of ``parts`` in order."""
        self.parts = tuple(parts)
        self.enabled = any(p.enabled for p in self.parts)

    def claim_answered(self, role: str, *, found: bool, started_ns: int, ended_ns: int) -> None:
        """Each part's."""
        for p in self.parts:
            p.claim_answered(role, found=found, started_ns=started_ns, ended_ns=ended_ns)

    def claim_failed(self, role: str, error: BaseException) -> None:
        """Each part's."""
        for p in self.parts:
            p.claim_failed(role, error)

    def tracker_call(
        self, action: str, *, started_ns: int, ended_ns: int, error: BaseException | None
    ) -> None:
        """Each part's."""
        for p in self.parts:
            p.tracker_call(action, started_ns=started_ns, ended_ns=ended_ns, error=error)

    def run(
        self, lease: Lease, role: str, *, claim_started_ns: int, claim_ended_ns: int
    ) -> RunTelemetry:
        """Each part's, as one."""
        return _RunFanOut(
            [
                p.run(lease, role, claim_started_ns=claim_started_ns, claim_ended_ns=claim_ended_ns)
                for p in self.parts
            ]
        )

    def attach(self, view: WorkerView) -> None:
        """Each part's."""
        for p in self.parts:
            p.attach(view)

    async def serve(self) -> None:
        """Each part's, side by side."""
        import anyio

        async with anyio.create_task_group() as tg:
            for p in self.parts:
                tg.start_soon(p.serve)

    async def aclose(self) -> None:
        """Each part's."""
        for p in self.parts:
            await p.aclose()


class _RunFanOut(RunTelemetry):
    def __init__(self, parts: list[RunTelemetry]) -> None:
        self.parts = parts
        self.traceparent = next((p.traceparent for p in parts if p.traceparent), None)

    def __enter__(self) -> RunTelemetry:
        for p in self.parts:
            p.__enter__()
        self.traceparent = next((p.traceparent for p in self.parts if p.traceparent), None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for p in reversed(self.parts):
            p.__exit__(exc_type, exc, tb)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        from contextlib import ExitStack

        with ExitStack() as stack:
            for p in self.parts:
                stack.enter_context(p.phase(name))
            yield

    def finished(self, result: RunEnd, *, duration_ns: int) -> None:
        for p in self.parts:
            p.finished(result, duration_ns=duration_ns)

    @contextmanager
    def within(self) -> Iterator[None]:
        from contextlib import ExitStack

        with ExitStack() as stack:
            for p in self.parts:
                stack.enter_context(p.within())
            yield
