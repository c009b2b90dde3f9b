"""What the worker's metrics and traces cost: the same drain with telemetry off and on.

    python -m bench.telemetry [--tasks 2000] [--concurrency 10] [--rounds 3]
                              [--modes off,metrics,tracing,tracing-otlp,both]

Each round drains N no-op tasks (``python`` executor) with one real ``python -m worker run
--drain`` process per mode, on a fresh SQLite rail each, modes interleaved round by round so a
busy machine weighs on all of them alike. Modes:

* ``off``: no ``[metrics]``, no ``[tracing]`` (the no-op telemetry, nothing imported);
* ``metrics``: ``[metrics] listen = "127.0.0.1:0"`` (a Prometheus endpoint nobody scrapes);
* ``tracing``: ``[tracing] enabled = true`` with the default ``export = "rail"``: every run's
  spans go into the same SQLite rail (that write is part of the cost);
* ``tracing-otlp``: ``export = "otlp"`` to a collector on 127.0.0.1 in this process that
  answers 200 and keeps nothing;
* ``both``: metrics and rail tracing.

Printed per mode: the median over rounds of tasks/s (the tracker's own timestamps, first claim
to last transition) and of the worker's CPU per task (user + system from ``wait4``: the steadier
figure on a shared machine), with the CPU of the same worker draining an empty queue (its
start-up: imports, the rail, the exporter) taken off, and their change against ``off``.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio

from bench.worker import _config, _seed, _spawn, _wait

MODES: dict[str, str] = {
    "off": "",
    "metrics": '[metrics]\nlisten = "127.0.0.1:0"\n',
    "tracing": "[tracing]\nenabled = true\n",
    "tracing-otlp": '[tracing]\nenabled = true\nexport = "otlp"\nendpoint = "{otlp}"\n',
    "both": '[metrics]\nlisten = "127.0.0.1:0"\n[tracing]\nenabled = true\n',
}


@contextlib.contextmanager
def _collector() -> Iterator[str]:
    """An OTLP/HTTP sink on 127.0.0.1: reads each body, answers 200, keeps nothing."""

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def _drain(mode: str, n: int, concurrency: int, otlp: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        db = tmp / "rail.db"
        anyio.run(_seed, db, n)
        config = _config(tmp, db, concurrency, drain=True)
        with config.open("a") as fh:
            fh.write("\n" + MODES[mode].format(otlp=otlp))
        wall = time.perf_counter()
        proc = _spawn(config)
        _rss, cpu = _wait(proc)
        wall = time.perf_counter() - wall
        with sqlite3.connect(db) as conn:
            first, last, done = conn.execute(
                "SELECT min(started_at_ms), max(ended_at_ms), count(*) FROM runs "
                "WHERE status = 'completed'"
            ).fetchone()
            spans = conn.execute("SELECT count(*) FROM spans").fetchone()[0]
        span = (last - first) / 1000 if done else 0.0
        return {
            "done": done,
            "tasks_per_s": done / span if span else 0.0,
            "cpu_s": cpu,
            "wall_s": wall,
            "rail_spans": spans,
            "exit_code": proc.returncode,
        }


def main() -> None:
    """Drain with each mode, round by round, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode {unknown[0]!r} (modes: {', '.join(MODES)})")
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    startup: dict[str, list[float]] = {m: [] for m in modes}
    with _collector() as otlp:
        for _ in range(args.rounds):
            for mode in modes:
                startup[mode].append(_drain(mode, 0, args.concurrency, otlp)["cpu_s"])
                results[mode].append(_drain(mode, args.tasks, args.concurrency, otlp))
    base: dict[str, float] = {}
    print(
        f"{args.tasks} no-op tasks, 1 worker x concurrency {args.concurrency}, "
        f"median of {args.rounds} rounds"
    )
    for mode in modes:
        rows = results[mode]
        rate = statistics.median(r["tasks_per_s"] for r in rows)
        idle_cpu = statistics.median(startup[mode])
        cpu = statistics.median((r["cpu_s"] - idle_cpu) / max(r["done"], 1) * 1e6 for r in rows)
        if mode == "off":
            base = {"rate": rate, "cpu": cpu}
        vs = (
            f" ({(rate / base['rate'] - 1) * 100:+.1f}% tasks/s, "
            f"{(cpu / base['cpu'] - 1) * 100:+.1f}% CPU)"
            if base and mode != "off"
            else ""
        )
        print(
            f"  {mode:<13} {rate:7.0f} tasks/s  {cpu:6.0f} us CPU/task{vs}; "
            f"start-up {idle_cpu * 1000:.0f} ms CPU, "
            f"spans in the rail {rows[-1]['rail_spans']}, "
            f"exit codes {sorted({r['exit_code'] for r in rows})}, "
            f"done {sorted({r['done'] for r in rows})}"
        )


if __name__ == "__main__":
    main()
