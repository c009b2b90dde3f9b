"""Helpers for the daemon tests (``tests/worker/test_daemon_*.py``) that use real processes.

* :class:`RouteFaults`: a TCP proxy on 127.0.0.1 in front of a served tracker whose faults are
  switched per route while the test runs: ``"hang"`` (the request is read, never answered, the
  connection stays open: a tracker that accepts and then wedges) or an HTTP status to answer
  instead of forwarding (``503``). It counts every request by ``METHOD /path``, and serves
  kept-alive clients (each request forwarded on a fresh upstream connection).
* :func:`serve_tracker`: a real ``backlog-worker tracker serve --port 0 --token-file`` process.
* :func:`spawn_worker`: a real ``backlog-worker run`` process, stderr to a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream
from anyio.from_thread import start_blocking_portal

from tests.faultproxy import closing_request, kept_alive_answer, read_request
from tests.remote.fixtures import wait_listening

TOKEN = "daemon-test-token-0123456789"
_CLI = (sys.executable, "-m", "worker")

PIPELINE_TOML = """
name = "flow"
[definition]
initial = "todo"
[definition.states.todo]
agent_role = "coder"
[definition.states.done]
terminal = true
[[definition.transitions]]
from = "todo"
to = "done"
trigger = "complete"
"""


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any BACKLOG_WORKER_* or systemd variable, plus ``extra``."""
    drop = ("BACKLOG_WORKER_", "NOTIFY_SOCKET", "WATCHDOG_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra)
    return env


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` at the end."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)


class RouteFaults:
    """A proxy to ``upstream_port`` with per-route faults (see the module docstring)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.rules: dict[str, str | int] = {}  # "METHOD /path-prefix" (or "") -> fate
        self.counts: Counter[str] = Counter()
        self.hung = 0  # requests currently held unanswered
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()
        self.port = 0

    def __enter__(self) -> RouteFaults:
        portal = self._stack.enter_context(start_blocking_portal())
        self._stop = portal.call(anyio.Event)
        self.port = portal.start_task(self._serve)[1]
        self._portal = portal
        return self

    def __exit__(self, *exc: object) -> None:
        self._portal.call(self._stop.set)
        self._stack.close()

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def set(self, prefix: str, fate: str | int | None) -> None:
        """Answer requests whose ``METHOD /path`` starts with ``prefix`` with ``fate`` (None:
        forward them again)."""
        with self._lock:
            if fate is None:
                self.rules.pop(prefix, None)
            else:
                self.rules[prefix] = fate

    def count(self, prefix: str) -> int:
        """Requests seen so far whose ``METHOD /path`` starts with ``prefix``."""
        with self._lock:
            return sum(n for key, n in self.counts.items() if key.startswith(prefix))

    async def _serve(self, *, task_status: Any) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        async with listener, anyio.create_task_group() as tg:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            tg.start_soon(listener.serve, self._handle)
            task_status.started(port)
            await self._stop.wait()
            tg.cancel_scope.cancel()

    def _fate(self, route: str) -> str | int | None:
        with self._lock:
            self.counts[route] += 1
            for prefix, fate in self.rules.items():
                if route.startswith(prefix):
                    return fate
        return None

    async def _handle(self, client: SocketStream) -> None:
        async with client:
            while await self._one(client):
                pass

    async def _one(self, client: SocketStream) -> bool:
        """One request (a kept-alive client sends the next on the same connection): True
        when the connection stays open for another."""
        request = await read_request(client)
        if not request:
            return False
        method, _, rest = request.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        fate = self._fate(f"{method.decode()} {path.decode()}")
        if fate == "hang":
            with self._lock:
                self.hung += 1
            try:
                await anyio.sleep_forever()
            finally:
                with self._lock:
                    self.hung -= 1
        if isinstance(fate, int):
            body = json.dumps({"error": {"code": "injected", "message": "injected"}}).encode()
            head = (
                f"HTTP/1.1 {fate} Injected\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            await client.send(head.encode() + body)
            return False
        request, close = closing_request(request)
        response = b""
        async with await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
            await upstream.send(request)
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    response += await upstream.receive()
        try:
            await client.send(response if close else kept_alive_answer(response))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return not close


def make_rail(tmp_path: Path) -> Path:
    """A new embedded rail ``tmp_path/rail.db`` with the ``flow`` pipeline (made by the CLI)."""
    db = tmp_path / "rail.db"
    flow = str(_pipeline(tmp_path))
    subprocess.run(
        [*_CLI, "pipeline", "create", "-f", flow, "--tracker", f"sqlite://{db}"],
        check=True,
        capture_output=True,
        env=clean_env(),
    )
    return db


@contextlib.contextmanager
def serve_tracker(tmp_path: Path, token: str | None = TOKEN) -> Iterator[tuple[str, Path]]:
    """A real ``tracker serve`` on ``tmp_path/rail.db`` with the ``flow`` pipeline and a token
    file (none when ``token`` is None: an open rail); yields (its URL, the rail file)."""
    db = make_rail(tmp_path)
    env = clean_env()
    serve_args: tuple[str, ...] = ("--port", "0")
    if token is not None:
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        serve_args += ("--token-file", str(token_file))
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*_CLI, "tracker", "serve", "--tracker", f"sqlite://{db}", *serve_args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        yield wait_listening(log, proc, 30), db
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "flow.toml"
    path.write_text(PIPELINE_TOML)
    return path


def write_config(
    tmp_path: Path,
    url: str,
    *,
    token: str | None,
    argv: list[str],
    request_timeout_s: float = 2,
    **worker: Any,
) -> Path:
    """A worker config for role ``coder`` running ``argv`` with fast retries and idling."""
    settings: dict[str, Any] = {
        "idle_min_s": 0.05,
        "idle_max_s": 0.2,
        "lease_ttl_s": 3,
        "shutdown_grace_s": 5,
        "maintenance_interval_s": 0.5,
        "concurrency": 1,
    }
    settings.update(worker)
    lines = ["[tracker]", f'url = "{url}"', "retry_initial_s = 0.05", "retry_max_s = 0.2"]
    lines += [f"request_timeout_s = {request_timeout_s}", "report_retry_budget_s = 3"]
    if token is not None:
        lines.append(f'api_token = "{token}"')
    lines.append("[worker]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    lines += ["[[roles]]", 'name = "coder"', 'executor = "command"', "[roles.options]"]
    lines.append(f"argv = {json.dumps(argv)}")
    path = tmp_path / "worker.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def python_config(
    tmp_path: Path,
    url: str,
    callable_path: str,
    *worker_lines: str,
    concurrency: int = 2,
    idle_max_s: float = 0.2,
) -> Path:
    """``tmp_path/worker.toml``: role ``r`` running the ``python`` executor's ``callable_path``
    on the rail at ``url``, fast idling, warnings only; ``worker_lines`` join ``[worker]``."""
    lines = ['log_level = "WARNING"', "[tracker]", f'url = "{url}"', "[worker]"]
    lines += [f"concurrency = {concurrency}", "idle_min_s = 0.05", f"idle_max_s = {idle_max_s}"]
    lines += [*worker_lines, "[[roles]]", 'name = "r"', 'executor = "python"', "[roles.options]"]
    lines.append(f'callable = "{callable_path}"')
    path = tmp_path / "worker.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def spawn_worker(
    config: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``backlog-worker run --config CONFIG ARGS...`` with stderr (the log) to ``log``."""
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config), *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env or clean_env(),
            start_new_session=True,
        )


def reap(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc``'s process group if it still runs (a failed test leaks no process)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


def cli(db: Path, *args: str) -> str:
    """``backlog-worker ARGS... --tracker sqlite://DB --json`` (a real process); its stdout."""
    done = subprocess.run(
        [*_CLI, *args, "--tracker", f"sqlite://{db}", "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    return done.stdout


def create_token(db: Path, name: str, *flags: str) -> str:
    """``backlog-worker token create NAME FLAGS...`` on the rail ``db`` (through :func:`cli`):
    the new scoped token's value (``--kind`` and its scope in ``flags``)."""
    return str(json.loads(cli(db, "token", "create", name, *flags))["token"])


def add_task(db: Path, title: str = "t") -> str:
    """Add a task to the ``flow`` pipeline of the rail ``db`` (another process); its id."""
    doc = json.loads(cli(db, "task", "add", "-p", "flow", title))
    return str(doc["id"] if "id" in doc else doc["ids"][0])


def leased(db: Path) -> int:
    """How many tasks of the rail ``db`` hold a lease now (read-only, from this process)."""
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        now_ms = int(time.time() * 1000)
        row = conn.execute("SELECT count(*) FROM tasks WHERE lease_expires_at_ms > ?", (now_ms,))
        return int(row.fetchone()[0])


def run_outcomes(db: Path, task_id: str) -> list[tuple[str, str | None]]:
    """The task's runs (status, error) in attempt order (read-only, from this process)."""
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT status, error FROM runs WHERE task_id = ? ORDER BY attempt", (task_id,)
        ).fetchall()
    return [(str(s), e) for s, e in rows]


def stage_and_expiry(db: Path, task_id: str) -> tuple[str, int]:
    """The task's stage and its lease's expiry (epoch ms; 0: none), read-only from this process."""
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT stage, coalesce(lease_expires_at_ms, 0) FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
    return str(row[0]), int(row[1])


#: One stage of role ``r``, then done: the pipeline of the tests whose workers run HOLD_JOB.
R_PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "trigger": "complete", "to": "done"}],
}
#: A python job (write it as ``drainjob.py`` beside the config; callable ``drainjob:run``):
#: done at once, except while the file ``hold`` exists beside it, so a test can hold its
#: workers with their slots full of leased tasks (a backup then, a second worker joining).
HOLD_JOB = """
import pathlib, anyio
HOLD = pathlib.Path(__file__).with_name("hold")
async def run(ctx):
    while HOLD.exists():
        await anyio.sleep(0.01)
"""
