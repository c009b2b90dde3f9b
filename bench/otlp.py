"""OTLP ingest throughput: spans stored per second, embedded and through ``tracker serve``.

    python -m bench.otlp [--spans 20000] [--batch 100]

Builds OTLP/JSON documents of ``--batch`` spans each (ten attributes, linked to one of 50 task
ids), then stores ``--spans`` spans: (1) ``await tracker.call("ingest_traces", document=...)``
on an embedded rail; (2) ``POST /v1/traces`` to a real ``backlog-worker tracker serve`` process
on 127.0.0.1 (one httpx client, sequential). Prints spans/s, the p50/p99 of one batch, the
body size, and how long ``list_spans`` of one task takes afterwards. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from tracker_client.factory import open_tracker

TASKS = 50


def _doc(batch: int, size: int) -> dict[str, Any]:
    spans = []
    for n in range(size):
        start = 1_790_000_000_000_000_000 + (batch * size + n) * 1_000
        attributes = [
            {"key": "nulltickets.task_id", "value": {"stringValue": f"task-{n % TASKS}"}},
            {"key": "nulltickets.run_id", "value": {"stringValue": f"run-{n % TASKS}"}},
        ] + [{"key": f"k{i}", "value": {"intValue": str(i)}} for i in range(8)]
        spans.append(
            {
                "traceId": f"{batch + 1:032x}",
                "spanId": f"{n + 1:016x}",
                "name": "bench.span",
                "kind": 1,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start + 500),
                "attributes": attributes,
                "status": {"code": 1},
            }
        )
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def _report(label: str, took: list[float], spans: int, total_s: float) -> None:
    p50 = statistics.median(took) * 1000
    p99 = sorted(took)[max(0, int(len(took) * 0.99) - 1)] * 1000
    print(f"{label:9} {spans / total_s:9.0f} spans/s   batch p50 {p50:6.1f} ms  p99 {p99:6.1f} ms")


async def _embedded(path: Path, docs: list[dict[str, Any]], spans: int) -> None:
    tracker = await open_tracker(f"sqlite:///{path}", create=True)
    try:
        took = []
        begin = time.perf_counter()
        for doc in docs:
            t0 = time.perf_counter()
            await tracker.call("ingest_traces", document=doc)
            took.append(time.perf_counter() - t0)
        _report("embedded", took, spans, time.perf_counter() - begin)
        t0 = time.perf_counter()
        listed = await tracker.call("list_spans", "task-0")
        ms = (time.perf_counter() - t0) * 1000
        print(f"list_spans of one task: {len(listed)} spans in {ms:.1f} ms")
    finally:
        await tracker.aclose()


def _served(tmp: Path, bodies: list[bytes], spans: int) -> None:
    log = tmp / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    command = [sys.executable, "-m", "worker", "tracker", "serve", "--port", "0", "--create"]
    command += ["--tracker", f"sqlite:///{tmp / 'served.db'}"]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        deadline = time.monotonic() + 20
        base = None
        while base is None and time.monotonic() < deadline:
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
            base = found.group(1) if found else None
            if proc.poll() is not None:
                raise SystemExit(f"tracker serve exited: {log.read_text()}")
            time.sleep(0.05)  # polling the real condition (the log line) under a deadline
        if base is None:
            raise SystemExit("tracker serve did not announce its address")
        took = []
        headers = {"Content-Type": "application/json"}
        with httpx.Client(base_url=base, timeout=60) as client:
            begin = time.perf_counter()
            for body in bodies:
                t0 = time.perf_counter()
                client.post("/v1/traces", content=body, headers=headers).raise_for_status()
                took.append(time.perf_counter() - t0)
            _report("served", took, spans, time.perf_counter() - begin)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def main() -> None:
    """Run both phases and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    docs = [_doc(b, args.batch) for b in range(max(1, args.spans // args.batch))]
    spans = len(docs) * args.batch
    bodies = [json.dumps(d).encode() for d in docs]
    print(f"{spans} spans in {len(docs)} batches of {args.batch} ({len(bodies[0])} bytes each)")
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(_embedded, Path(tmp) / "embedded.db", docs, spans)
        _served(Path(tmp), bodies, spans)


if __name__ == "__main__":
    main()
