"""What a worker process imports: heavy modules it does not need must stay unloaded.

``backlog-worker run`` on an embedded (SQLite) rail is a long-running process whose resident
memory is mostly the modules it imported. These tests run the real ``backlog-worker run`` in a
subprocess (it drains a few tasks through the ``python`` executor on a SQLite rail) and check
that the operator commands (rich), the HTTP client (httpx), the served tracker (starlette,
uvicorn), the remote tracker and unconfigured executors stayed out of its ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import anyio
import click

from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from worker.cli import COMMAND_MODULES

ROOT = Path(__file__).resolve().parents[1]

#: Modules a worker on an embedded rail must not load (package names or exact module names).
HEAVY = (
    "httpx",
    "httpcore",
    "h11",
    "rich",
    "starlette",
    "uvicorn",
    "tracker_client.nulltickets.client",
    "tracker_client.serve.app",
    "worker.cli.ops",
    "worker.cli.ops.common",
    "worker.cli.serve",
    "worker.demo",
    "plugins.command.executor",
    "plugins.nullclaw.executor",
    "tenacity",  # the retry slow path imports it; a worker whose calls all succeed never does
    # issue 16 (memory): the producer API (connect/Rail: agent models, difflib), the other
    # rails and the optional features stay out of an embedded worker that does not use them
    "tracker_client.producer",
    "tracker_client.postgres",
    "tracker_client.serve",
    "tracker_client.nulltickets.transport",
    "psycopg",
    "psycopg_pool",
    "jinja2",
    "prometheus_client",
    "opentelemetry",
)

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}

# The real `backlog-worker run`, in process, printing the loaded modules when it exits.
_RUN_AND_LIST_MODULES = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules))))
sys.argv = ["backlog-worker", "run", "--config", sys.argv[1]]
from worker.cli import main
main()
"""


def _python(code: str, *args: str, path: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(path), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=path,
        timeout=50,
        check=False,
    )


def _modules(proc: subprocess.CompletedProcess[str]) -> set[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


async def _seed(db: Path) -> None:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pipeline_id = await tracker.create_pipeline("p", PIPELINE)
        await tracker.create_tasks(
            [TaskCreate(pipeline_id=pipeline_id, title=f"t{i}") for i in range(3)]
        )
    finally:
        await tracker.aclose()


def test_worker_on_an_embedded_rail_imports_no_heavy_modules(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, db)
    (tmp_path / "noop_job.py").write_text(
        "from plugins.api import Transition\n\n\nasync def run(ctx):\n    return Transition()\n"
    )
    config = tmp_path / "worker.toml"
    config.write_text(
        textwrap.dedent(f"""
        log_level = "WARNING"
        [tracker]
        url = "sqlite:///{db}"
        [worker]
        concurrency = 2
        drain = true
        [[roles]]
        name = "r"
        executor = "python"
        [roles.options]
        callable = "noop_job:run"
        """)
    )
    modules = _modules(_python(_RUN_AND_LIST_MODULES, str(config), path=tmp_path))
    with closing(sqlite3.connect(db)) as conn:
        (done,) = conn.execute("SELECT count(*) FROM runs WHERE status = 'completed'").fetchone()
    assert done == 3  # the worker really claimed, executed and transitioned
    assert {"worker.daemon", "tracker_client.embedded", "plugins.python.executor"} <= modules
    assert _heavy(modules) == []


def test_resolving_the_run_command_leaves_other_commands_unimported() -> None:
    modules = _modules(
        _python(
            """
        import json, sys, click
        from worker.cli import main
        assert main.get_command(click.Context(main), "run") is not None
        print(json.dumps(sorted(sys.modules)))
        """
        )
    )
    assert "worker.cli.run" in modules
    assert not {"worker.cli.ops", "worker.cli.serve", "rich", "httpx"} & modules


def test_command_table_matches_what_each_module_registers() -> None:
    """``COMMAND_MODULES`` names every command exactly once, with the module that adds it."""
    import importlib

    for module_name in sorted(set(COMMAND_MODULES.values())):
        group = click.Group()
        importlib.import_module(module_name).register(group)
        expected = {name for name, mod in COMMAND_MODULES.items() if mod == module_name}
        assert set(group.commands) == expected, module_name


def test_help_lists_every_command() -> None:
    from click.testing import CliRunner

    from worker.cli import main

    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line}
    assert listed == set(COMMAND_MODULES)
