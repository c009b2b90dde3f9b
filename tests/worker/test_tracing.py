"""``[tracing]`` end to end: real ``backlog-worker run --drain`` processes on a real SQLite rail.

* ``export = "rail"``: after the runs, ``list_spans(task)`` holds the claim -> run -> executor /
  report -> tracker call tree with the run's attributes; a ``command`` child got the run span's
  ``TRACEPARENT``; a ``python`` executor joins the trace from ``ctx.traceparent``; a failed run
  has status ERROR and its outcome; the keeper's heartbeats hang under their run.
* ``export = "otlp"``: a collector on 127.0.0.1 receives the same spans as OTLP/HTTP protobuf.
* Off: the process imports no ``opentelemetry`` module and children get no ``TRACEPARENT``; on
  without the extra (or, for ``otlp``, without its exporter): a config error naming it, and no
  task is claimed.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.worker.tracekit import Collector, drain, seed, spans_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

otel = pytest.importorskip("opentelemetry.sdk", reason="pip install -e '.[test]' (the otel extra)")

#: The ``command`` child: record $TRACEPARENT (empty when unset), outlive a heartbeat or two.
CHILD = (
    "import os, pathlib, sys, time; "
    "pathlib.Path(sys.argv[1]).write_text(os.environ.get('TRACEPARENT', '<unset>')); "
    "time.sleep(float(sys.argv[2]))"
)

#: A ``python`` executor (imported by the worker from the test's directory): records
#: ``ctx.traceparent`` and the trace it joins, fails the task titled ``bad``.
PYJOB = """
import json, pathlib
from plugins.api import Failure

def record(ctx):
    out = {"traceparent": ctx.traceparent}
    if ctx.traceparent is not None:
        from opentelemetry import trace
        from opentelemetry.propagate import extract

        parent = trace.get_current_span(extract({"traceparent": ctx.traceparent}))
        out["joined_trace_id"] = f"{parent.get_span_context().trace_id:032x}"
    pathlib.Path(ctx.options["out"], ctx.task.id + ".json").write_text(json.dumps(out))
    if ctx.task.title == "bad":
        return Failure(reason="bad_task", message="this task always fails", retryable=False)
    return None
"""


def _config(tmp_path: Path, db: Path, tracing: str, *, sleep_s: float = 0.0) -> Path:
    (tmp_path / "pyjob_tracing.py").write_text(PYJOB)
    argv = [sys.executable, "-c", CHILD, str(tmp_path / "tp-{task.id}.txt"), str(sleep_s)]
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{db}"

[worker]
concurrency = 2
idle_min_s = 0.05
idle_max_s = 0.5
report_flush_s = 0.1
lease_ttl_s = 1.5

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = {json.dumps(argv)}

[[roles]]
name = "py"
executor = "python"
[roles.options]
callable = "pyjob_tracing:record"
out = {json.dumps(str(tmp_path))}

{tracing}
"""
    )
    return path


def _by_name(spans: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def _run_ids(db: Path, task_id: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM runs WHERE task_id = ?", (task_id,))]


async def test_rail_export_links_claim_run_phases_and_calls(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    ids = await seed(
        db, [("flow", "coder", "slow"), ("pyflow", "py", "ok"), ("pyflow", "py", "bad")]
    )
    config = _config(tmp_path, db, "[tracing]\nenabled = true", sleep_s=1.2)
    done = drain(config, PYTHONPATH=str(tmp_path))
    assert done.code == 0, done.log

    # the command run: the whole tree, every span linked to the task and run
    spans = await spans_of(db, ids["slow"])
    names = _by_name(spans)
    [claim], [run], [executor], [report] = (
        names[n] for n in ("claim", "run", "executor", "report")
    )
    [transition] = names["tracker.transition"]
    [run_id] = _run_ids(db, ids["slow"])
    assert {s.trace_id for s in spans} == {claim.trace_id}
    assert {(s.task_id, s.run_id) for s in spans} == {(ids["slow"], run_id)}
    assert claim.parent_span_id is None
    assert run.parent_span_id == claim.span_id
    assert executor.parent_span_id == run.span_id
    assert report.parent_span_id == run.span_id
    assert transition.parent_span_id == report.span_id
    # the keeper's heartbeats (another task) hang under their run
    assert names["tracker.heartbeat"], [s.name for s in spans]
    assert {s.parent_span_id for s in names["tracker.heartbeat"]} == {run.span_id}
    assert claim.end_time_unix_nano <= run.start_time_unix_nano
    assert run.start_time_unix_nano <= executor.start_time_unix_nano
    assert executor.end_time_unix_nano <= report.start_time_unix_nano
    assert report.end_time_unix_nano <= run.end_time_unix_nano
    assert run.attributes["nulltickets.task_id"] == ids["slow"]
    assert run.attributes["nulltickets.run_id"] == run_id
    assert run.attributes["backlog.role"] == "coder"
    assert run.attributes["backlog.attempt"] == 1
    assert run.attributes["backlog.outcome"] == "transitioned"
    assert run.status_code == 1  # OK
    assert run.service_name == "backlog-worker"
    assert claim.kind == 3 and transition.kind == 3  # CLIENT
    # the command's child got the run span's trace context
    traceparent = (tmp_path / f"tp-{ids['slow']}.txt").read_text()
    assert traceparent.startswith(f"00-{run.trace_id}-{run.span_id}-")

    # the python executor: ctx.traceparent, joined with opentelemetry.propagate.extract
    ok_spans = _by_name(await spans_of(db, ids["ok"]))
    [ok_run] = ok_spans["run"]
    seen = json.loads((tmp_path / f"{ids['ok']}.json").read_text())
    assert seen["traceparent"].startswith(f"00-{ok_run.trace_id}-{ok_run.span_id}-")
    assert seen["joined_trace_id"] == ok_run.trace_id
    assert ok_run.trace_id != run.trace_id  # one trace per claimed run

    # the failed run: status ERROR, its outcome, the fail call under the report
    bad = _by_name(await spans_of(db, ids["bad"]))
    [bad_run], [bad_report], [fail] = bad["run"], bad["report"], bad["tracker.fail"]
    assert bad_run.status_code == 2  # ERROR
    assert bad_run.status_message == "failed"
    assert bad_run.attributes["backlog.outcome"] == "failed"
    assert bad_run.attributes["backlog.dead_lettered"] is True
    assert fail.parent_span_id == bad_report.span_id
    assert fail.status_code == 0  # the call itself went through


async def test_otlp_export_reaches_a_collector(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    ids = await seed(db, [("flow", "coder", "one")])
    with Collector().running() as collector:
        endpoint = f"http://127.0.0.1:{collector.port}/v1/traces"
        tracing = (
            f'[tracing]\nenabled = true\nexport = "otlp"\nendpoint = "{endpoint}"\n'
            'service_name = "traced-worker"'
        )
        done = drain(_config(tmp_path, db, tracing), PYTHONPATH=str(tmp_path))
    assert done.code == 0, done.log
    assert collector.posts, "the collector received nothing"
    assert {(path, kind) for path, kind, _ in collector.posts} == {
        ("/v1/traces", "application/x-protobuf")
    }
    spans = collector.spans()
    names = {s.name: s for s in spans}
    assert {"claim", "run", "executor", "report", "tracker.transition"} <= set(names)
    run = names["run"]
    assert names["executor"].parent_span_id == run.span_id
    assert run.parent_span_id == names["claim"].span_id
    attrs = {a.key: a.value for a in run.attributes}
    assert attrs["nulltickets.task_id"].string_value == ids["one"]
    assert attrs["backlog.outcome"].string_value == "transitioned"
    assert attrs["backlog.attempt"].int_value == 1
    traceparent = (tmp_path / f"tp-{ids['one']}.txt").read_text()
    assert traceparent.startswith(f"00-{run.trace_id.hex()}-{run.span_id.hex()}-")
    # the resource names the configured service; nothing went into the rail
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(collector.posts[0][2])
    resource = {a.key: a.value.string_value for a in request.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "traced-worker"
    assert await spans_of(db, ids["one"]) == []


async def test_tracing_off_imports_nothing_and_sets_no_traceparent(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    ids = await seed(db, [("flow", "coder", "plain"), ("pyflow", "py", "ok")])
    done = drain(_config(tmp_path, db, ""), PYTHONPATH=str(tmp_path))
    assert done.code == 0, done.log
    assert done.otel_modules == []
    assert (tmp_path / f"tp-{ids['plain']}.txt").read_text() == "<unset>"
    assert json.loads((tmp_path / f"{ids['ok']}.json").read_text()) == {"traceparent": None}
    assert await spans_of(db, ids["plain"]) == []


async def test_tracing_on_without_the_extra_is_a_config_error(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    ids = await seed(db, [("flow", "coder", "waiting")])
    done = drain(_config(tmp_path, db, "[tracing]\nenabled = true"), block="opentelemetry")
    assert done.code == 2, done.log  # a config error
    assert "pip install 'backlog-worker[otel]'" in done.log, done.log
    assert "Traceback" not in done.log
    assert _run_ids(db, ids["waiting"]) == []  # nothing claimed
    assert not (tmp_path / f"tp-{ids['waiting']}.txt").exists()


async def test_otlp_without_its_exporter_is_a_config_error(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    ids = await seed(db, [("flow", "coder", "waiting")])
    tracing = (
        '[tracing]\nenabled = true\nexport = "otlp"\nendpoint = "http://127.0.0.1:9/v1/traces"'
    )
    done = drain(_config(tmp_path, db, tracing), block="opentelemetry.exporter")
    assert done.code == 2, done.log
    assert 'export = "otlp" (the OTLP/HTTP exporter) needs the otel extra' in done.log, done.log
    assert "Traceback" not in done.log
    assert _run_ids(db, ids["waiting"]) == []
