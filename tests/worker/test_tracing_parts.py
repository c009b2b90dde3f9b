"""``[tracing]`` in process: config errors, the OTLP/JSON document, TRACEPARENT for children,
sampling, and a rail that refuses spans (the runs go on; counted and logged once).

The end-to-end checks with real ``backlog-worker run`` processes are in ``test_tracing.py``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.api import ExecutionContext
from plugins.nullclaw.executor import NullClawExecutor
from plugins.proc.env import trace_env
from tests.nullclaw.conftest import RecordingSink, fake_bin, make_ctx, options, read_record, record
from tracker_client.errors import ConfigError, TrackerUnavailable
from tracker_client.protocol import Tracker
from tracker_client.rules.otlpjson import parse_traces
from worker.config.models import load_config
from worker.config.telemetry import TracingConfig
from worker.daemon import Worker
from worker.telemetry.setup import build

from .conftest import add_tasks, role, start_worker, wait_until, worker_config

pytest.importorskip("opentelemetry.sdk", reason="pip install -e '.[test]' (the otel extra)")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, Status, StatusCode

from worker.telemetry import otlpjson
from worker.telemetry.tracing import WorkerTracing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
__all__ = ["fake_bin", "options", "record"]  # the nullclaw fixtures, used here

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('enabled = true\nexport = "otlp"', r"tracing.*endpoint"),
        ('enabled = true\nexport = "otlp"\nendpoint = "ftp://x/v1/traces"', r"endpoint.*http"),
        ('enabled = true\nendpoint = "127.0.0.1:4318"', r"endpoint.*http"),
        ("enabled = true\nsample_ratio = 1.5", r"sample_ratio"),
        ('enabled = true\nexport = "jaeger"', r"export"),
        ('enabled = true\nservice_name = " "', r"service_name.*empty"),
        ("enabled = true\nendpont = 'http://x'", r"endpont"),
    ],
)
def test_bad_tracing_tables_are_named(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(f"[tracing]\n{table}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def _spans() -> list[Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    root = tracer.start_span(
        "root", kind=SpanKind.CLIENT, attributes={"nulltickets.task_id": "T1", "n": 3}
    )
    from opentelemetry import trace

    child = tracer.start_span(
        "child",
        context=trace.set_span_in_context(root),
        attributes={"nulltickets.run_id": "R1", "ok": True, "ratio": 0.5, "tags": ["a", "b"]},
    )
    child.add_event("note", {"k": "v"})
    child.set_status(Status(StatusCode.ERROR, "failed"))
    child.end()
    root.end()
    return list(exporter.get_finished_spans())


def test_the_document_is_what_the_rail_reads() -> None:
    spans = _spans()
    document = otlpjson.document(spans)
    json.dumps(document)  # plain JSON
    parsed = {s.name: s for s in parse_traces(document)}
    root, child = parsed["root"], parsed["child"]
    ctx = spans[1].get_span_context()  # the root ended last
    assert root.trace_id == f"{ctx.trace_id:032x}" and root.span_id == f"{ctx.span_id:016x}"
    assert child.parent_span_id == root.span_id and root.parent_span_id is None
    assert root.kind == 3 and child.kind == 1  # CLIENT, INTERNAL as OTLP numbers them
    assert (root.task_id, child.run_id) == ("T1", "R1")
    assert child.attributes == {
        "nulltickets.run_id": "R1",
        "ok": True,
        "ratio": 0.5,
        "tags": ["a", "b"],
    }
    assert root.attributes["n"] == 3
    assert (child.status_code, child.status_message) == (2, "failed")
    assert root.start_time_unix_nano is not None and root.end_time_unix_nano is not None
    assert root.start_time_unix_nano <= root.end_time_unix_nano


def test_trace_env_passes_only_a_traceparent() -> None:
    assert trace_env(TP) == {"TRACEPARENT": TP}
    assert trace_env(None) == {}
    assert trace_env("00-zz-b7ad6b7169203331-01") == {}
    assert trace_env(TP + "\nX=1") == {}


async def test_nullclaw_child_gets_traceparent_and_still_no_token(
    tmp_path: Path, options: dict[str, Any], record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_WORKER_API_TOKEN", "tracker-secret-123")
    monkeypatch.setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
    ctx = make_ctx(tmp_path / "run", RecordingSink())
    ctx.traceparent = TP
    await NullClawExecutor(options).execute(ctx)
    env = read_record(record)["env"]
    assert env["TRACEPARENT"] == TP  # the run's, not the worker's own
    assert "BACKLOG_WORKER_API_TOKEN" not in env
    ctx = make_ctx(tmp_path / "run2", RecordingSink())
    await NullClawExecutor(options).execute(ctx)
    assert "TRACEPARENT" not in read_record(record)["env"]  # not traced, not listed


def test_build_picks_tracing_only_when_enabled() -> None:
    assert not build_enabled(TracingConfig())
    tracing = build(_metrics_off(), TracingConfig(enabled=True))
    assert isinstance(tracing, WorkerTracing)


def build_enabled(config: TracingConfig) -> bool:
    return build(_metrics_off(), config).enabled


def _metrics_off() -> Any:
    from worker.config.telemetry import MetricsConfig

    return MetricsConfig()


class RefusingRail:
    """The real rail for everything but ``ingest_traces``, which it refuses (a rail without
    the operation or a token it does not accept is a fault this stands for)."""

    def __init__(self, inner: Tracker) -> None:
        self._inner = inner
        self.refusals = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def call(self, operation: str, *params: str, **arguments: Any) -> Any:
        if operation == "ingest_traces":
            self.refusals += 1
            raise TrackerUnavailable("no spans today")
        return await self._inner.call(operation, *params, **arguments)


async def _run_worker(tracker: Any, tracing: WorkerTracing, fn: Any, n: int) -> Worker:
    worker = Worker(tracker, worker_config(), [role("coder", fn)], telemetry=tracing)
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: worker.stats.transitioned == n)
        worker.stop()
    return worker


async def test_a_refusing_rail_loses_spans_not_runs(
    tracker: Tracker, pipeline_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    rail = RefusingRail(tracker)
    tracing = WorkerTracing(TracingConfig(enabled=True))
    seen: list[str | None] = []

    async def fn(ctx: ExecutionContext) -> None:
        seen.append(ctx.traceparent)

    await add_tasks(tracker, pipeline_id, 3)
    with caplog.at_level(logging.WARNING, "backlog_worker.tracing"):
        worker = await _run_worker(rail, tracing, fn, 3)  # its end flushes (aclose)
    assert worker.stats.transitioned == 3 and worker.stats.failed == 0
    assert len(seen) == 3 and all(tp and tp.startswith("00-") for tp in seen)
    assert rail.refusals >= 1
    assert tracing.exported == 0 and tracing.dropped >= 3 * 4  # claim, run, executor, report...
    refused = [r for r in caplog.records if getattr(r, "action", "") == "tracing_refused"]
    assert len(refused) == 1  # logged once, however often refused
    assert "no spans today" in refused[0].getMessage()


async def test_sampled_out_runs_make_no_spans_but_pass_the_decision_on(
    tracker: Tracker, pipeline_id: str
) -> None:
    tracing = WorkerTracing(TracingConfig(enabled=True, sample_ratio=0.0))
    seen: list[str | None] = []

    async def fn(ctx: ExecutionContext) -> None:
        seen.append(ctx.traceparent)

    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    await _run_worker(tracker, tracing, fn, 1)
    [tp] = seen
    assert tp is not None
    assert int(tp.rsplit("-", 1)[1], 16) & 1 == 0  # not sampled: the child doesn't record either
    assert await tracker.call("list_spans", task_id) == []
    assert tracing.exported == 0 and tracing.dropped == 0


async def test_rail_export_in_process_and_flush_at_close(
    tracker: Tracker, pipeline_id: str
) -> None:
    tracing = WorkerTracing(TracingConfig(enabled=True, service_name="in-process"))

    async def fn(ctx: ExecutionContext) -> None:
        await ctx.report("progress", {"step": 1})

    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    await _run_worker(tracker, tracing, fn, 1)  # its end sends what serve() had not
    spans = await tracker.call("list_spans", task_id)
    names = sorted(s.name for s in spans)
    assert {"claim", "run", "executor", "report", "tracker.transition"} <= set(names)
    assert {s.service_name for s in spans} == {"in-process"}
    assert tracing.exported == len(spans) and tracing.dropped == 0


async def test_with_metrics_too_the_spans_and_heartbeats_are_the_same(
    tracker: Tracker, pipeline_id: str
) -> None:
    from worker.config.telemetry import MetricsConfig
    from worker.telemetry import FanOut

    both = build(MetricsConfig(listen="127.0.0.1:0"), TracingConfig(enabled=True))
    assert isinstance(both, FanOut)
    seen: list[str | None] = []

    async def slow(ctx: ExecutionContext) -> None:
        seen.append(ctx.traceparent)
        await anyio.sleep(0.5)  # two heartbeats at a 0.6 s lease

    [task_id] = await add_tasks(tracker, pipeline_id, 1)
    worker = Worker(tracker, worker_config(lease_ttl_s=0.6), [role("coder", slow)], telemetry=both)
    async with anyio.create_task_group() as tg:
        await start_worker(tg, worker)
        await wait_until(lambda: worker.stats.transitioned == 1)
        worker.stop()
    spans = await tracker.call("list_spans", task_id)
    [run] = [s for s in spans if s.name == "run"]
    beats = [s for s in spans if s.name == "tracker.heartbeat"]
    assert beats and {s.parent_span_id for s in beats} == {run.span_id}
    [tp] = seen  # the fan-out hands on the tracing part's context
    assert tp is not None and tp.startswith(f"00-{run.trace_id}-{run.span_id}-")
