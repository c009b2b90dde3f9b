"""Helpers for the tracing tests (``tests/worker/test_tracing*.py``): real worker processes.

* :func:`drain`: a real ``backlog-worker run --drain`` process (through a ``python -c`` wrapper
  that can block imports and record, at exit, which ``opentelemetry`` modules were loaded).
* :class:`Collector`: a tiny OTLP/HTTP collector on 127.0.0.1 keeping every POST body.
* :func:`seed`: pipelines and tasks on a real SQLite rail.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.worker.daemonkit import clean_env
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate

#: ``python -c`` prologue: optionally make a package unimportable, record at exit which
#: of its modules the process loaded, then run the CLI with the remaining arguments.
#: Python source making the package named by ``block`` (``-``: none) unimportable, as if it
#: were not installed (an import hook first on ``sys.meta_path``).
BLOCK_IMPORTS = """
if block != "-":
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == block or name.startswith(block + "."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _Block())
"""

WRAPPER = (
    """
import atexit, json, sys
record, block = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
"""
    + BLOCK_IMPORTS
    + """
def _record():
    with open(record, "w") as fh:
        json.dump(sorted(m for m in sys.modules if m.startswith("opentelemetry")), fh)
atexit.register(_record)
from worker.cli import main
sys.argv[0] = "backlog-worker"
main()
"""
)


@dataclass
class Drained:
    """How a ``run --drain`` process ended."""

    code: int
    log: str
    #: The ``opentelemetry`` modules the process had imported when it exited.
    otel_modules: list[str]


def drain(config: Path, *, timeout_s: float = 60.0, block: str = "-", **env: str) -> Drained:
    """Run ``backlog-worker run --config CONFIG --drain`` to its end (``block``: a package
    the process can't import, as if it were not installed)."""
    import json

    record = config.with_name("modules.json")
    log = config.with_name("worker.log")
    argv = [sys.executable, "-c", WRAPPER, str(record), block]
    argv += ["run", "--config", str(config), "--drain"]
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=fh, env=clean_env(**env), cwd=config.parent
        )
        try:
            code = proc.wait(timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    modules = json.loads(record.read_text()) if record.exists() else []
    return Drained(code, log.read_text(), modules)


@dataclass
class Collector:
    """An OTLP/HTTP collector on 127.0.0.1 (see the module docstring)."""

    #: ``(path, content type, body)`` of each POST, in order.
    posts: list[tuple[str, str, bytes]] = field(default_factory=list)
    port: int = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[Collector]:
        """Serve in a thread until the block ends."""
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size)
                posts.append((self.path, self.headers.get("Content-Type") or "", body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(10)

    def spans(self) -> list[Any]:
        """Every span received (protobuf ``Span`` messages), with ``service.name`` checked."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        out: list[Any] = []
        for _path, _kind, body in self.posts:
            request = ExportTraceServiceRequest.FromString(body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    out.extend(ss.spans)
        return out


def flow(initial: str, role: str) -> dict[str, Any]:
    """A one-stage pipeline: ``initial`` (worked by ``role``) -> ``done`` by ``complete``."""
    return {
        "initial": initial,
        "states": {initial: {"agent_role": role}, "done": {"terminal": True}},
        "transitions": [{"from": initial, "to": "done", "trigger": "complete"}],
    }


async def seed(db: Path, tasks: Sequence[tuple[str, str, str]]) -> dict[str, str]:
    """``(pipeline name, role, title)`` tasks (each pipeline created once, one attempt each):
    their ids by title."""
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pipelines: dict[str, str] = {}
        ids: dict[str, str] = {}
        for name, role, title in tasks:
            if name not in pipelines:
                pipelines[name] = await tracker.create_pipeline(name, flow(f"{name}_todo", role))
            ids[title] = await tracker.create_task(
                TaskCreate(
                    pipeline_id=pipelines[name],
                    title=title,
                    retry_policy=RetryPolicy(max_attempts=1),
                )
            )
        return ids
    finally:
        await tracker.aclose()


async def spans_of(db: Path, task_id: str) -> list[Any]:
    """``list_spans(task_id)`` on the rail."""
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        return list(await tracker.call("list_spans", task_id))
    finally:
        await tracker.aclose()
