"""A small WSGI web app that enqueues tasks: the blocking producer API in a threaded server.

    backlog-worker pipeline create -f examples/pipelines/review.toml --tracker sqlite:///./rail.db
    BACKLOG_WORKER_TRACKER_URL=sqlite:///./rail.db python examples/producer/wsgi_app.py
    # POST http://127.0.0.1:8000/tasks {"title": "Write the changelog", "metadata": {}} -> {"id"}
    # GET  http://127.0.0.1:8000/tasks/ID -> {"id", "stage", "title"}

The same shape fits Flask or Django: open one rail when the app starts (``connect_sync(url)
.open()``: one event-loop thread for the app's lifetime, shared by every request thread) and
close it at shutdown. Bad input is answered 400 with the tracker's message naming the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server

from tracker_client import SyncRail, connect_sync
from tracker_client.errors import NotFound, ValidationFailed

Start = Callable[[str, list[tuple[str, str]]], Any]


def make_app(
    rail: SyncRail, pipeline: str = "review"
) -> Callable[[dict[str, Any], Start], Iterable[bytes]]:
    """The WSGI app: ``POST /tasks`` submits to ``pipeline``, ``GET /tasks/ID`` reads one."""

    def app(environ: dict[str, Any], start: Start) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        try:
            if method == "POST" and path == "/tasks":
                size = int(environ.get("CONTENT_LENGTH") or 0)
                body = json.loads(environ["wsgi.input"].read(size) or b"{}")
                task_id = rail.submit(
                    pipeline, body.get("title", ""), metadata=body.get("metadata")
                )
                return _answer(start, "201 Created", {"id": task_id})
            if method == "GET" and path.startswith("/tasks/"):
                task = rail.task(path.removeprefix("/tasks/"))
                return _answer(
                    start, "200 OK", {"id": task.id, "stage": task.stage, "title": task.title}
                )
            return _answer(start, "404 Not Found", {"error": "no such route"})
        except (ValidationFailed, ValueError) as exc:
            return _answer(start, "400 Bad Request", {"error": str(exc)})
        except NotFound as exc:
            return _answer(start, "404 Not Found", {"error": str(exc)})

    return app


def _answer(start: Start, status: str, doc: dict[str, Any]) -> list[bytes]:
    start(status, [("Content-Type", "application/json")])
    return [json.dumps(doc).encode()]


class ThreadingServer(ThreadingMixIn, WSGIServer):
    """A thread per request, as a production WSGI server would run them."""

    daemon_threads = True


if __name__ == "__main__":
    url = os.environ.get("BACKLOG_WORKER_TRACKER_URL", "sqlite:///./rail.db")
    with connect_sync(url, token=os.environ.get("BACKLOG_WORKER_API_TOKEN")) as shared:
        port = int(os.environ.get("PORT", "8000"))
        with make_server("127.0.0.1", port, make_app(shared), ThreadingServer) as server:
            print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
            server.serve_forever()
