"""Code on the docs' pages that is neither a walkthrough nor a config: run here as written.

- docs/executors/command.md: the ``outcome.json`` a command writes, read by the real command
  executor (the artifact it declares is recorded with its hash and size);
- docs/operate/tracing.md: the Python executor joining the run's trace, run with the real
  OpenTelemetry SDK under a traceparent (its span is the run span's child).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from plugins.api import Transition
from plugins.registry import load_executor
from plugins.testing import ExecutorHarness
from tests.docs.blocks import find

pytestmark = pytest.mark.anyio

COMMAND_PAGE = "docs/executors/command.md"
TRACING_PAGE = "docs/operate/tracing.md"


async def test_command_outcome_json_records_its_artifact(tmp_path: Path) -> None:
    outcome = json.loads(find(COMMAND_PAGE, lang="json").body)
    write = (
        "import json, pathlib, sys\n"
        "pathlib.Path('out').mkdir()\n"
        "pathlib.Path('out/report.md').write_text('# report\\n')\n"
        "pathlib.Path('outcome.json').write_text(pathlib.Path(sys.argv[1]).read_text())\n"
    )
    page_outcome = tmp_path / "outcome-from-the-page.json"
    page_outcome.write_text(json.dumps(outcome))
    options = {"argv": [sys.executable, "-c", write, str(page_outcome)], "exit_codes": {"0": ""}}
    harness = ExecutorHarness(options=options, workdir=tmp_path / "run")
    assert await harness.run(load_executor("command", options)) == Transition("complete")
    (artifact,) = harness.artifacts
    assert artifact.kind == "report"
    assert artifact.meta == {"lines": 12, "path": "out/report.md"}
    assert artifact.size_bytes == len("# report\n")


async def test_tracing_executor_joins_the_run_trace() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    namespace: dict[str, Any] = {}
    exec(compile(find(TRACING_PAGE, lang="python").body, TRACING_PAGE, "exec"), namespace)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    namespace["trace"] = SimpleNamespace(get_tracer=provider.get_tracer)  # not the global one
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    ctx = SimpleNamespace(traceparent=f"00-{trace_id}-{parent_id}-01")
    await namespace["summarise"](ctx)
    (span,) = exporter.get_finished_spans()
    assert span.name == "summarise"
    assert span.parent is not None and format(span.parent.span_id, "016x") == parent_id
    assert format(span.context.trace_id, "032x") == trace_id
