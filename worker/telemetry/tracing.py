"""OpenTelemetry traces of the worker (``[tracing] enabled``; the ``otel`` extra).

One trace per claimed task. Its root is the ``claim`` span (written after the fact with the
claim's real start and end, only for claims that found a task); the ``run`` span is its child and
holds the run's attributes and outcome; ``executor`` and ``report`` are the run's phases, and
every tracker call the run makes is a ``tracker.<action>`` child of the innermost open one
(``tracker.transition`` under ``report``, ``tracker.add_event`` under ``executor`` or ``run``,
the keeper's ``tracker.heartbeat`` under ``run`` through :meth:`RunTelemetry.within`). The run
is a child rather than a trace of its own linked to the claim so that one sampling decision (the
claim's, parent-based ratio) keeps or drops a task's spans together, and so one trace id stands
for one claimed run, which is what an executor's own spans join (``TRACEPARENT`` = the run
span's).

Every span carries ``nulltickets.task_id`` and ``nulltickets.run_id``, which is how a rail links
it to the task (``task show``, ``list_spans``). The provider is this worker's own, never the
global one, so an in-process Python executor's instrumentation is not mixed with the worker's.

Export: ``otlp`` is the SDK's ``BatchSpanProcessor`` + ``OTLPSpanExporter`` (HTTP/protobuf, its
own thread); ``rail`` queues finished spans in memory and :meth:`WorkerTracing.serve` sends them
in the event loop, each second or every :data:`BATCH_SPANS` spans, as one OTLP/JSON document
(:data:`tracker_client.calls.INGEST_TRACES`, ``document=...``). A run never waits for it, and a
rail that refuses spans loses them, counted and logged once.

This module is imported only when tracing is on; without the extra it raises
:class:`~tracker_client.errors.ConfigError` naming it. It may touch its spans, its exporter and
(``rail``) its tracker's ``ingest_traces``; nothing else of the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from tracker_client import calls
from tracker_client.extras import missing
from worker.config.telemetry import TracingConfig
from worker.telemetry import RunEnd, RunTelemetry, Telemetry, WorkerView

try:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - tested in a subprocess without the extra
    raise missing("otel", "[tracing] enabled = true (OpenTelemetry traces)", exc) from exc

from worker.telemetry import otlpjson

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from tracker_client.models import Lease
    from tracker_client.protocol import Tracker

__all__ = [
    "BATCH_SPANS",
    "FLUSH_INTERVAL_S",
    "MAX_QUEUED_SPANS",
    "WorkerTracing",
    "otlp_exporter",
    "traceparent_of",
]

log = logging.getLogger("backlog_worker.tracing")

#: The span attributes that link a span to its task and run (docs/guarantees/nulltickets.md).
TASK_ID = "nulltickets.task_id"
RUN_ID = "nulltickets.run_id"
#: ``rail`` export: seconds between sends, spans that trigger one sooner, spans kept at most
#: while the rail does not take them (newer ones are dropped and counted).
FLUSH_INTERVAL_S = 1.0
BATCH_SPANS = 512
MAX_QUEUED_SPANS = 8192
#: How long :meth:`WorkerTracing.aclose` may take to hand over the last spans.
CLOSE_BUDGET_S = 5.0
#: Run outcomes (``RunResult.status``) whose run span has status ERROR.
ERROR_OUTCOMES = frozenset({"failed", "lost", "conflict", "report_failed"})


def traceparent_of(ctx: SpanContext) -> str:
    """The W3C ``traceparent`` header of a span context (``00-<trace>-<span>-<flags>``)."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _error(span: Span, error: BaseException) -> None:
    # The class and the tracker's error code only: an error's text may quote a request.
    kind = type(error).__name__
    code = getattr(error, "code", None)
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, f"{kind} ({code})" if code else kind))


def otlp_exporter() -> Any:
    """The OTLP/HTTP span exporter class (``export = "otlp"``); ``ConfigError`` naming the
    ``otel`` extra when it is not installed (``backlog-worker check`` asks this too)."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise missing("otel", '[tracing] export = "otlp" (the OTLP/HTTP exporter)', exc) from exc
    return OTLPSpanExporter


@dataclass(frozen=True, slots=True)
class _Open:
    """The innermost open span of a run in this task: where a tracker call's span goes."""

    span: Span
    run: _RunTrace


_CURRENT: ContextVar[_Open | None] = ContextVar("backlog_worker_trace", default=None)


class _RailQueue(SpanProcessor):
    """Finished sampled spans kept for :meth:`WorkerTracing.serve` (``export = "rail"``)."""

    def __init__(self) -> None:
        self.spans: deque[ReadableSpan] = deque()
        self.dropped = 0
        self.wake: Callable[[], None] | None = None
        self.loop_thread: int | None = None

    def on_end(self, span: ReadableSpan) -> None:
        if len(self.spans) >= MAX_QUEUED_SPANS:
            self.dropped += 1
            return
        self.spans.append(span)
        # spans end in the event loop; one ended elsewhere waits for the next tick
        if (
            len(self.spans) >= BATCH_SPANS
            and self.wake is not None
            and threading.get_ident() == self.loop_thread
        ):
            self.wake()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class WorkerTracing(Telemetry):
    """The worker's spans (see the module docstring): a :class:`Telemetry` on its own
    ``TracerProvider``, sampled parent-based by ``config.sample_ratio``."""

    enabled = True

    def __init__(self, config: TracingConfig) -> None:
        """Export spans as ``config`` says (``otlp``: the exporter starts its thread now)."""
        self.config = config
        #: Spans handed to the rail, and spans lost (queue full or refused by the rail).
        self.exported = 0
        self.refused = 0
        self._warned = False
        self._tracker: Tracker | None = None
        self._agent_id: str | None = None
        self.provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            resource=Resource.create({"service.name": config.service_name}),
            shutdown_on_exit=False,  # aclose() flushes, within a budget
        )
        self._rail: _RailQueue | None = None
        if config.export == "otlp":
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            exporter = otlp_exporter()(endpoint=config.endpoint, timeout=CLOSE_BUDGET_S)
            self.provider.add_span_processor(BatchSpanProcessor(exporter))
        else:
            self._rail = _RailQueue()
            self.provider.add_span_processor(self._rail)
        self.tracer = self.provider.get_tracer("backlog_worker")

    @property
    def dropped(self) -> int:
        """Spans that never reached the rail (its queue was full, or it refused them)."""
        return self.refused + (self._rail.dropped if self._rail is not None else 0)

    def attach(self, view: WorkerView) -> None:
        """Keep the worker's tracker (the ``rail`` export's destination) and agent id."""
        self._tracker = view.tracker
        self._agent_id = view.agent_id

    def run(
        self, lease: Lease, role: str, *, claim_started_ns: int, claim_ended_ns: int
    ) -> RunTelemetry:
        """The run's trace: its ``claim`` span is written now, the ``run`` span starts when
        the run does."""
        return _RunTrace(self, lease, role, claim_started_ns, claim_ended_ns)

    def tracker_call(
        self, action: str, *, started_ns: int, ended_ns: int, error: BaseException | None
    ) -> None:
        """A ``tracker.<action>`` span under the run's innermost open span, if a run is
        current here (claims and the worker's own calls have none)."""
        where = _CURRENT.get()
        if where is None or where.run.closed:
            return
        span = self.tracer.start_span(
            f"tracker.{action}",
            context=trace.set_span_in_context(where.span),
            kind=SpanKind.CLIENT,
            attributes=where.run.ids,
            start_time=started_ns,
        )
        if error is not None:
            _error(span, error)
        span.end(end_time=ended_ns)

    async def serve(self) -> None:
        """``rail``: send the queued spans every second, or sooner once a batch is full.
        ``otlp``: nothing (the exporter has its own thread)."""
        rail = self._rail
        if rail is None:
            return
        rail.loop_thread = threading.get_ident()
        try:
            while True:
                wake = anyio.Event()
                rail.wake = wake.set
                with anyio.move_on_after(FLUSH_INTERVAL_S):
                    await wake.wait()
                await self._send()
        finally:
            rail.wake = None

    async def aclose(self) -> None:
        """Hand over the last spans (within :data:`CLOSE_BUDGET_S`) and stop the exporter."""
        with anyio.move_on_after(CLOSE_BUDGET_S):
            if self._rail is not None:
                await self._send(everything=True)
            else:
                await anyio.to_thread.run_sync(self.provider.shutdown, abandon_on_cancel=True)
        if self.dropped:
            log.warning(
                "tracing: %d spans sent to the rail, %d lost",
                self.exported,
                self.dropped,
                extra={"action": "tracing_summary"},
            )

    async def _send(self, *, everything: bool = False) -> None:
        """Send what is queued, then go on while full batches are waiting (``everything``: to
        the last span); stop at the first refusal (the rest waits for the next tick).
        Cancelled mid-send, the batch goes back to the queue."""
        rail = self._rail
        assert rail is not None
        first = True
        tracker = self._tracker
        while tracker is not None and (
            len(rail.spans) >= (1 if first or everything else BATCH_SPANS)
        ):
            first = False
            batch = [rail.spans.popleft() for _ in range(min(len(rail.spans), BATCH_SPANS))]
            try:
                # encoded in a thread: the event loop goes on claiming and reporting meanwhile
                document = await anyio.to_thread.run_sync(otlpjson.document, batch)
                await calls.INGEST_TRACES.call(tracker, document=document)
            except Exception as exc:  # a refusal must never reach the worker
                self._refuse(len(batch), exc)
                return
            except BaseException:
                rail.spans.extendleft(reversed(batch))
                raise
            self.exported += len(batch)

    def _refuse(self, count: int, error: Exception) -> None:
        self.refused += count
        if not self._warned:
            self._warned = True
            log.warning(
                "tracing: the rail refused %d spans (%s: %s); spans it refuses are dropped and "
                "counted, not logged again",
                count,
                type(error).__name__,
                error,
                extra={"action": "tracing_refused"},
            )


class _RunTrace(RunTelemetry):
    """One run's spans (see the module docstring)."""

    def __init__(
        self, owner: WorkerTracing, lease: Lease, role: str, claim_started_ns: int, ended_ns: int
    ) -> None:
        self._tracer = owner.tracer
        #: The attributes every span of the run carries (its task's and run's ids).
        self.ids: Mapping[str, str] = {TASK_ID: lease.task.id, RUN_ID: lease.run.id}
        self._attributes: dict[str, str | int] = {
            **self.ids,
            "backlog.role": role,
            "backlog.attempt": lease.run.attempt,
        }
        if owner._agent_id:
            self._attributes["backlog.agent_id"] = owner._agent_id
        started = claim_started_ns or time.time_ns()
        claim = self._tracer.start_span(
            "claim", kind=SpanKind.CLIENT, attributes=self._attributes, start_time=started
        )
        claim.end(end_time=max(ended_ns, started))
        self._claim: Context = trace.set_span_in_context(claim)
        self.sampled = claim.get_span_context().trace_flags.sampled
        # Not sampled: the executor still gets the trace (flags 00) and nothing else is made.
        self.traceparent = traceparent_of(claim.get_span_context())
        self._span: Span | None = None
        self._token: Token[_Open | None] | None = None
        self._outcome: str | None = None
        self.closed = False

    def __enter__(self) -> RunTelemetry:
        if self.sampled and self._span is None:
            self._span = self._tracer.start_span(
                "run", context=self._claim, attributes=self._attributes
            )
            self.traceparent = traceparent_of(self._span.get_span_context())
            self._token = _CURRENT.set(_Open(self._span, self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if span is None or self.closed:
            return
        if exc is not None and self._outcome is None:
            if isinstance(exc, Exception):
                span.set_attribute("backlog.outcome", "error")
                _error(span, exc)
            else:  # cancelled (the worker stopped hard) or interrupted
                span.set_attribute("backlog.outcome", "cancelled")
        self.closed = True
        span.end()
        if self._token is not None:
            try:
                _CURRENT.reset(self._token)
            except ValueError:  # left in another context than entered: nothing to restore
                _CURRENT.set(None)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """An ``executor`` or ``report`` span, current for the tracker calls made inside."""
        if self._span is None or self.closed:
            yield
            return
        where = _CURRENT.get()
        parent = where.span if where is not None and where.run is self else self._span
        span = self._tracer.start_span(
            name, context=trace.set_span_in_context(parent), attributes=self.ids
        )
        token = _CURRENT.set(_Open(span, self))
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, Exception):
                _error(span, exc)
            raise
        finally:
            span.end()
            _CURRENT.reset(token)

    def finished(self, result: RunEnd, *, duration_ns: int) -> None:
        """The outcome on the run span (``backlog.outcome``), status ERROR when it failed."""
        span = self._span
        if span is None or self.closed:
            return
        self._outcome = result.status
        span.set_attribute("backlog.outcome", result.status)
        if result.status == "failed":
            span.set_attribute("backlog.dead_lettered", result.dead_lettered)
        if result.status in ERROR_OUTCOMES:
            span.set_status(Status(StatusCode.ERROR, result.status))
        else:
            span.set_status(Status(StatusCode.OK))

    @contextmanager
    def within(self) -> Iterator[None]:
        """The run current in another task (the keeper's heartbeats and flushes)."""
        if self._span is None or self.closed:
            yield
            return
        token = _CURRENT.set(_Open(self._span, self))
        try:
            yield
        finally:
            _CURRENT.reset(token)
