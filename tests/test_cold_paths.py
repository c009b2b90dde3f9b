"""The cold-path promise of a running worker (issue 16, memory), pinned in real processes.

A worker's resident memory is mostly the modules it imported, so what a run does not use must
stay unimported. Each test runs the real ``backlog-worker run`` (drain mode, ``python``
executor, a no-op job) in a subprocess that prints its ``sys.modules`` at exit:

* on an embedded rail: no command it is not running (``check``, the systemd unit renderer, the
  operator commands), no reload planner before a SIGHUP, no HTTP client (httpx; its CLI module
  pulls rich and pygments), no server (starlette, uvicorn, the dashboard's jinja2), no other
  rail, no telemetry that is off, no cron parser without schedules; with
  ``[worker] event_loop = "asyncio"``, no uvloop;
* on a served rail (a real ``tracker serve`` on 127.0.0.1): no embedded tracker (nor cronsim)
  in the worker, nor the server side, nor httpx's command-line client (rich, pygments).

``ssl`` is not pinned: asyncio, anyio's asyncio backend and uvloop import it themselves (measured
with ``python -m bench.memory``; it costs ~5 MiB with OpenSSL's libcrypto).
``tests/test_imports.py`` pins the older part of the same promise.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from tests.worker.daemonkit import python_config
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from worker.cli import COMMAND_MODULES

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]

#: What no worker on any rail imports (packages or exact modules) unless it is configured.
NEVER = (
    "worker.cli.check",
    "worker.cli.check_report",
    "worker.cli.systemd.unit",
    "worker.cli.systemd.sandbox",
    "worker.cli.systemd.serve",
    "worker.cli.ops",
    "worker.cli.serve",
    "worker.config.reload",
    "worker.telemetry.metrics",
    "worker.telemetry.tracing",
    "worker.demo",
    "tracker_client.dashboard",
    "tracker_client.serve",
    "tracker_client.postgres",
    "tracker_client.producer",
    "starlette",
    "uvicorn",
    "jinja2",
    "prometheus_client",
    "opentelemetry",
    "psycopg",
    "plugins.command.executor",
    "plugins.nullclaw.executor",
    # issue 31 (memory): the child-process machinery, for the executors that spawn (~0.5 MiB);
    # the run reads only its kill-deadline variable (plugins.proc.guard)
    "plugins.proc.process",
    # issue 31 (memory): cronsim is read only where a schedule is (the config's
    # [[schedules]], a due schedule)
    "cronsim",
    # the MCP server and its SDK, the web and token helpers of other commands, rail copies
    "worker.cli.web",
    "worker.cli.serve_token",
    "worker.cli.check_telemetry",
    "tracker_client.mcp",
    "mcp",
    "httpx2",
    "tracker_client.railcopy",
    "tracker_client.embedded.backup",
    # an operator's pipeline apply/diff and a server's OTLP parser
    "tracker_client.rules.evolve",
    "tracker_client.rules.otlpjson",
    # and the module of every command but ``run`` (a new command is covered as it is added)
    *sorted({module for name, module in COMMAND_MODULES.items() if name != "run"}),
)
#: What a worker on an embedded rail does not import besides: the remote client's stack.
NOT_EMBEDDED = (
    "httpx",
    "httpcore",
    "h11",
    "rich",
    "pygments",
    "tracker_client.nulltickets.client",
    "tracker_client.nulltickets.transport",
    # issue 31: the closest-name hint of an error, imported where the error is
    "difflib",
    # issue 31 (start-up): the wire contract's rows (~2 ms), read only by a call by name
    "tracker_client.contract.table",
    "tracker_client.contract.operations",
    # issue 31 (start-up): the wire contract's other bodies and its operation types (~5 ms of
    # CPU)
    "tracker_client.contract.wire_models",
    "tracker_client.contract.contract_types",
    # issue 31 (memory): the password mask of error lines (its case-blind regexes compile at
    # import); the remote and PostgreSQL rails' options use it to name their URL
    "tracker_client.urlmask",
    # issue 31 (start-up): the answers of the operator's calls (cancel, requeue, wait, purge,
    # follow, pipeline plans, ~14 M instructions) and the schedules' and rate limits' models
    # (~7 M), imported where a rule builds one; the served rail's client reads them all
    "tracker_client.ops_models",
    "tracker_client.schedule_models",
    # issue 31 (start-up): the models a worker never builds (a task's detail and relations,
    # the create body, events, pages, the health census: ~17 M instructions), created on first use
    "tracker_client.cold_models",
    # issue 31 (start-up): the OTLP ingest's answer and the spans (~3 M instructions)
    "tracker_client.observe_cold",
    # issue 31 (start-up): the schema window's planner (two dataclasses, ~7 M instructions),
    # imported only to migrate or create a rail; opening a current one plans nothing
    "tracker_client.rules.upgrades",
    # issue 31 (start-up): the file-artifact helper (a dataclass, ~3.7 M instructions), read
    # when a run records a file
    "plugins.artifact_files",
    # issue 31 (start-up): the batching extensions' wire bodies (~8 M instructions) and the run
    # bodies they carry (~4 M): the rails take FinishItem and answer FinishResult in-process
    "tracker_client.contract.batch_bodies",
    "tracker_client.contract.run_bodies",
    # issue 31 (start-up): the operator's backlog calls and the purge (a dataclass each), read
    # by a call or a maintenance pass
    "tracker_client.rules.backlog",
    "tracker_client.rules.retention",
)
#: What a worker on a served rail does not import besides: the embedded rail, and httpx's own
#: command-line client (``httpx._main``: rich and pygments), which ``run`` keeps out. (It
#: imports httpcore and h11: httpx's transport carries ``http://``, see docs/benchmarks.md.)
NOT_SERVED = (
    "tracker_client.embedded",
    "httpx._main",
    "rich",
    "pygments",
)

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}

# The real `backlog-worker run`, in process, printing its modules (those imported: a module marked
# absent is None) and the loop class of each task at exit.
_RUN = """
import asyncio, atexit, json, sys
loops = []
def report():
    modules = sorted(name for name, module in sys.modules.items() if module is not None)
    print(json.dumps({"modules": modules, "loops": loops}))
atexit.register(report)
import plugins.api
async def job(ctx):
    loops.append(type(asyncio.get_running_loop()).__module__)
    return plugins.api.Transition()
sys.modules["noop_job"] = type(sys)("noop_job")
sys.modules["noop_job"].run = job
sys.argv = ["backlog-worker", "run", "--config", sys.argv[1]]
from worker.cli import main
main()
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


async def _seed(db: Path, n: int) -> None:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pipeline_id = await tracker.create_pipeline("p", PIPELINE)
        await tracker.create_tasks(
            [TaskCreate(pipeline_id=pipeline_id, title=f"t{i}") for i in range(n)]
        )
    finally:
        await tracker.aclose()


def _config(tmp_path: Path, url: str, *worker_lines: str) -> Path:
    """A drain-mode worker running ``noop_job:run`` on ``url``."""
    return python_config(tmp_path, url, "noop_job:run", "drain = true", *worker_lines)


def _run(config: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    return _python(prelude + _RUN, config)


def _python(script: str, config: Path) -> subprocess.CompletedProcess[str]:
    """``script`` run by a fresh interpreter with ``config`` as its argument, in the config's
    folder (the workers of these tests, and of the model and PostgreSQL import tests)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(config)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=config.parent,
        timeout=90,
        check=False,
    )


def _report(proc: subprocess.CompletedProcess[str]) -> dict[str, list[str]]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report: dict[str, list[str]] = json.loads(proc.stdout.splitlines()[-1])
    return report


def _loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def _completed(db: Path) -> int:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        (done,) = conn.execute("SELECT count(*) FROM runs WHERE status = 'completed'").fetchone()
    return int(done)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real ``tracker serve`` on a free 127.0.0.1 port over a seeded rail: (file, url)."""
    db = tmp_path / "served.db"
    anyio.run(_seed, db, 3)
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "worker", "tracker", "serve", "--tracker", f"sqlite://{db}"]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*argv, "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "tracker serve did not listen: " + log.read_text()
            time.sleep(0.05)  # polling the server's own log line under a deadline
        yield db, found.group(1)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_an_embedded_worker_leaves_every_cold_path_unimported(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db, 3)
    report = _report(_run(_config(tmp_path, f"sqlite:///{db}", 'event_loop = "asyncio"')))
    assert _completed(db) == 3  # it really claimed, ran and transitioned every task
    modules = report["modules"]
    assert {"worker.cli.run", "tracker_client.embedded", "plugins.python.executor"} <= set(modules)
    assert _loaded(modules, NEVER + NOT_EMBEDDED + ("uvloop",)) == []
    assert report["loops"] == ["asyncio.unix_events"] * 3


@pytest.mark.slow
def test_a_served_worker_imports_no_embedded_rail(served: tuple[Path, str], tmp_path: Path) -> None:
    db, url = served
    report = _report(_run(_config(tmp_path, url)))
    assert _completed(db) == 3
    modules = report["modules"]
    assert "tracker_client.nulltickets.client" in modules
    assert _loaded(modules, NEVER + NOT_SERVED) == []


@pytest.mark.slow
@pytest.mark.skipif(
    __import__("importlib").util.find_spec("uvloop") is None, reason="uvloop is not installed"
)
def test_event_loop_auto_runs_on_uvloop_where_installed(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db, 3)
    report = _report(_run(_config(tmp_path, f"sqlite:///{db}")))
    assert report["loops"] == ["uvloop"] * 3
    assert _completed(db) == 3


def test_event_loop_uvloop_without_uvloop_is_a_config_error(tmp_path: Path) -> None:
    """uvloop missing (hidden from the child: this machine has it) with ``event_loop =
    "uvloop"``: exit 2 naming the key, before the rail is opened (nothing claimed)."""
    db = tmp_path / "rail.db"
    anyio.run(_seed, db, 1)
    hide = 'import sys\nsys.modules["uvloop"] = None\n'
    proc = _run(_config(tmp_path, f"sqlite:///{db}", 'event_loop = "uvloop"'), prelude=hide)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert '[worker] event_loop = "uvloop": uvloop is not installed' in proc.stderr
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_an_unknown_event_loop_is_refused_naming_the_key(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db, 1)
    proc = _run(_config(tmp_path, f"sqlite:///{db}", 'event_loop = "trio"'))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "event_loop" in proc.stderr
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_a_reload_keeps_the_running_event_loop() -> None:
    from worker.config.models import Config
    from worker.config.reload import plan_reload

    running = Config.model_validate({"worker": {"event_loop": "uvloop"}})
    fresh = Config.model_validate({"worker": {"event_loop": "asyncio"}})
    applied, pending = plan_reload(running, fresh)
    assert applied.worker.event_loop == "uvloop"
    assert pending == ["worker.event_loop"]


#: What a maintenance pass, which every worker on an embedded or PostgreSQL rail runs every
#: ``[worker] maintenance_interval_s``, does not import (issue 31, memory: ~0.3 MiB of a busy
#: worker's peak): the operator's backlog calls, their answers and the cold models they name.
NOT_IN_MAINTENANCE = (
    "tracker_client.rules.backlog",
    "tracker_client.ops_models",
    "tracker_client.cold_models",
)

_MAINTAIN = """
import json, sys, anyio
from tracker_client.factory import open_tracker
async def main():
    tracker = await open_tracker(f"sqlite:///{sys.argv[1]}")
    try:
        report = await tracker.maintenance()
    finally:
        await tracker.aclose()
    modules = sorted(name for name, module in sys.modules.items() if module is not None)
    print(json.dumps({"modules": modules, "report": report.model_dump()}))
anyio.run(main)
"""


def test_a_maintenance_pass_leaves_the_operators_answers_unimported(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db, 3)
    proc = _python(_MAINTAIN, db)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["report"]["expired_leases"] == 0  # a real pass answered its report
    modules = found["modules"]
    # it ran the pass and its purge (the default retention), not the operator's calls
    assert {"tracker_client.rules.maintenance", "tracker_client.rules.retention"} <= set(modules)
    assert _loaded(modules, NOT_IN_MAINTENANCE) == []
