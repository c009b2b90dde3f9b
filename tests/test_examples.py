"""Every file in examples/ is loaded the way its comments tell a user to load it.

Pipelines go through ``pipeline create -f`` on a fresh rail; worker configs through the config
loader, building each role's executor; the command and python configs run tasks end to end with
``run --drain``; the systemd drop-in goes through ``systemd-analyze verify`` beside the unit; the
executor-plugin package is found through its entry point (a dist-info built from its own
pyproject.toml, as an install would write it) by ``plugins``, ``check`` and ``run``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from plugins.registry import load_executor
from tests.needs import require_tool
from worker.cli import main
from worker.cli.systemd.unit import UnitOptions, render_service, resolve_exec
from worker.config.models import load_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PLUGIN = EXAMPLES / "executor-plugin"
DROP_IN = EXAMPLES / "systemd" / "backlog-worker@.service.d" / "agents.conf"
PIPELINES = sorted((EXAMPLES / "pipelines").glob("*.toml"))
WORKERS = sorted((EXAMPLES / "workers").glob("*.toml"))

# verify resolves User=/Group= only on some setups; that user is made at install time
# (docs/operate/systemd.md)
HARMLESS = re.compile(r"(user|group)[^\n]*backlog-worker[^\n]*(not found|no such|unknown)", re.I)

#: Every example file and the test that loads it (a new example needs a line here, and a test).
COVERED = {
    "pipelines/review.toml": "test_pipeline_example_creates_a_pipeline",
    "pipelines/code-review.toml": "test_pipeline_example_creates_a_pipeline",
    "workers/command.toml": "test_command_and_python_examples_run_tasks_end_to_end",
    "workers/python.toml": "test_command_and_python_examples_run_tasks_end_to_end",
    "workers/nullclaw.toml": "test_worker_example_builds_every_executor",
    "scripts/draft.py": "test_command_and_python_examples_run_tasks_end_to_end",
    "scripts/review.py": "test_command_and_python_examples_run_tasks_end_to_end",
    "python/review_jobs.py": "test_command_and_python_examples_run_tasks_end_to_end",
    "systemd/backlog-worker@.service.d/agents.conf": "test_systemd_drop_in_verifies_with_the_unit",
    "executor-plugin/pyproject.toml": "test_executor_plugin_is_found_through_its_entry_point",
    "executor-plugin/worker.toml": "test_executor_plugin_is_found_through_its_entry_point",
    "executor-plugin/src/greeter_executor/__init__.py": (
        "test_executor_plugin_is_found_through_its_entry_point"
    ),
    "executor-plugin/tests/test_greeter.py": "test_executor_plugin_own_tests_pass",
    "producer/enqueue.py": "test_producer_examples_enqueue_on_a_rail",
    "producer/wsgi_app.py": "test_producer_examples_enqueue_on_a_rail",
    **dict.fromkeys(
        ["agents/planner.toml", "agents/research.toml", "agents/worker.toml", "agents/agents.py"],
        "test_agents_example_runs_in_its_own_module",
    ),
}


def cli(*args: str) -> Any:
    """``backlog-worker ARGS --json`` in process; expect exit 0, return the parsed output."""
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def worker_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker subprocess: no stray settings, run directories in tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env.pop("PYTHONPATH", None)
    env["BACKLOG_WORKER_WORKER__WORKDIR"] = str(tmp_path / "runs")
    env["COLUMNS"] = "200"
    return {**env, **extra}


def backlog_worker(
    *args: str, env: dict[str, str], cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """``backlog-worker ARGS`` as a real process (from the repository root, as the comments say)."""
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_example_file_is_covered_by_a_test() -> None:
    on_disk = {
        p.relative_to(EXAMPLES).as_posix()
        for p in EXAMPLES.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    }
    assert on_disk == set(COVERED)
    tests = set(globals())
    assert set(COVERED.values()) <= tests


def test_agents_example_runs_in_its_own_module() -> None:
    """examples/agents/ runs end to end in tests/test_example_agents.py (real processes)."""
    assert (ROOT / "tests" / "test_example_agents.py").is_file()


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.name)
def test_pipeline_example_creates_a_pipeline(path: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/rail.db"
    created = cli("pipeline", "create", "-f", str(path), "--tracker", url)
    name = tomllib.loads(path.read_text())["name"]
    assert created["name"] == name
    shown = cli("pipeline", "show", name, "--tracker", url)
    states = shown["definition"]["states"]
    assert any(s.get("terminal") for s in states.values())
    assert all(s.get("agent_role") or s.get("terminal") for s in states.values())


def test_worker_configs_serve_the_roles_of_the_example_pipelines() -> None:
    roles = set()
    for path in PIPELINES:
        states = tomllib.loads(path.read_text())["definition"]["states"]
        roles |= {s["agent_role"] for s in states.values() if "agent_role" in s}
    served = {r.name for path in WORKERS for r in load_config(path).roles}
    assert served == roles


@pytest.mark.parametrize("path", [*WORKERS, PLUGIN / "worker.toml"], ids=lambda p: p.parent.name)
def test_worker_example_builds_every_executor(
    path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What the comments tell the user to put on the import path (PYTHONPATH=examples/python;
    # the plugin installed), and no stray BACKLOG_WORKER_* of this machine.
    for name in list(os.environ):
        if name.startswith("BACKLOG_WORKER_"):
            monkeypatch.delenv(name)
    monkeypatch.syspath_prepend(str(EXAMPLES / "python"))
    monkeypatch.syspath_prepend(str(PLUGIN / "src"))
    config = load_config(path)
    assert config.roles
    for role in config.roles:
        executor = role.executor
        if executor == "greeter":  # no entry point in this process: the same factory by path
            executor = "greeter_executor:Greeter"
        load_executor(executor, role.options)  # ExecutorError names any bad option


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("config", ["command", "python"])
def test_command_and_python_examples_run_tasks_end_to_end(config: str, tmp_path: Path) -> None:
    """The comments' commands: create the pipeline, add tasks, check, run --drain; all done."""
    url = f"sqlite:///{tmp_path}/rail.db"
    path = f"examples/workers/{config}.toml"
    env = worker_env(tmp_path)
    if config == "python":
        env["PYTHONPATH"] = "examples/python"
    for args in (
        ["pipeline", "create", "-f", "examples/pipelines/review.toml"],
        ["task", "add", "-p", "review", "Write the changelog"],
        ["task", "add", "-p", "review", "WIP release notes"],
        ["check"],
        ["run", "--drain"],
    ):
        proc = backlog_worker(*args, "--config", path, "--tracker", url, env=env)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
    tasks = {t["title"]: t for t in cli("task", "list", "--all", "--tracker", url)["items"]}
    assert {title: t["stage"] for title, t in tasks.items()} == {
        "Write the changelog": "done",
        "WIP release notes": "done",
    }
    shown = cli("task", "show", tasks["WIP release notes"]["id"], "--tracker", url)
    transitions = [e["data"] for e in shown["events"] if e["kind"] == "transition"]
    assert [t["trigger"] for t in transitions] == ["submit", "reject", "submit", "approve"]
    assert all(r["status"] == "completed" for r in shown["runs"])


def test_systemd_drop_in_verifies_with_the_unit(tmp_path: Path) -> None:
    analyze = require_tool("systemd-analyze", "apt install systemd")

    def verify(drop_in: str) -> list[str]:
        unit_dir = tmp_path / f"units-{len(list(tmp_path.iterdir()))}"
        (unit_dir / "backlog-worker@.service.d").mkdir(parents=True)
        (unit_dir / "backlog-worker@.service").write_text(
            render_service(UnitOptions(exec_start=resolve_exec()))
        )
        (unit_dir / "backlog-worker@.service.d" / DROP_IN.name).write_text(drop_in)
        env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "cat"}
        proc = subprocess.run(
            [analyze, "verify", "--man=no", str(unit_dir / "backlog-worker@1.service")],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        lines = (proc.stdout + proc.stderr).splitlines()
        lines = [ln for ln in lines if not HARMLESS.search(ln)]
        return lines if proc.returncode == 0 or lines else [f"exit {proc.returncode}"]

    text = DROP_IN.read_text()
    assert [ln for ln in text.splitlines() if ln.startswith("[")] == ["[Service]"]
    assert verify(text) == []
    # the check reads the drop-in: a misspelt key in it is named
    complaints = verify(text.replace("ReadWritePaths=", "ReadWritePathz="))
    assert any("ReadWritePathz" in line and DROP_IN.name in line for line in complaints)


def plugin_dist_info(site: Path) -> None:
    """What ``pip install`` of examples/executor-plugin writes for its entry points, from its
    own pyproject.toml (a dist-info with METADATA and entry_points.txt), into ``site``."""
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {value}" for name, value in entries.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_executor_plugin_is_found_through_its_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    plugin_dist_info(site)
    env = worker_env(tmp_path, PYTHONPATH=os.pathsep.join([str(site), str(PLUGIN / "src")]))

    listed = backlog_worker("plugins", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "greeter_executor:Greeter" in listed.stdout, listed.stdout

    url = f"sqlite:///{tmp_path}/rail.db"
    config = "examples/executor-plugin/worker.toml"
    for args in (
        ["pipeline", "create", "-f", "examples/pipelines/review.toml"],
        ["task", "add", "-p", "review", "Ada"],
        ["check"],
        ["run", "--drain"],
    ):
        proc = backlog_worker(*args, "--config", config, "--tracker", url, env=env)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    [task] = cli("task", "list", "--all", "--tracker", url)["items"]
    assert task["stage"] == "review"  # the writer's default trigger, submit; no reviewer here
    events = cli("task", "show", task["id"], "--tracker", url)["events"]
    results = [e["data"] for e in events if e["kind"] == "result"]
    assert results == [{"said": "hello, Ada", "attempt": 1}]

    # without the dist-info, the same config is refused by name: the entry point did the work
    missing = backlog_worker(
        "check", "--config", config, "--tracker", url, env={**env, "PYTHONPATH": str(PLUGIN)}
    )
    assert missing.returncode != 0
    assert "no executor plugin named 'greeter'" in missing.stdout + missing.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_executor_plugin_own_tests_pass(tmp_path: Path) -> None:
    """The package's tests (the harness page's example) pass as its author would run them."""
    env = worker_env(tmp_path, PYTHONPATH=str(PLUGIN / "src"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout


def test_producer_examples_enqueue_on_a_rail(tmp_path: Path) -> None:
    """examples/producer: the enqueue script as its docstring runs it, and the WSGI app's
    routes (in process, on the same real rail file: submit, read, a bad title refused)."""
    import io
    import runpy

    from tracker_client import connect_sync

    env = worker_env(tmp_path)
    rail = f"sqlite:///{tmp_path / 'rail.db'}"
    made = backlog_worker(
        "pipeline",
        "create",
        "-f",
        str(EXAMPLES / "pipelines" / "review.toml"),
        "--tracker",
        rail,
        env=env,
    )
    assert made.returncode == 0, made.stderr
    script = [sys.executable, str(EXAMPLES / "producer" / "enqueue.py"), "--tracker", rail]
    first = subprocess.run(
        [*script, "Write the changelog"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    after = subprocess.run(
        [*script, "--after", first[0], "--wait", "0.2", "Ship it"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert re.fullmatch(r"(\S{36})\n\1 pending draft\n", after), after
    app_module = runpy.run_path(str(EXAMPLES / "producer" / "wsgi_app.py"))
    with connect_sync(rail) as shared:
        app = app_module["make_app"](shared)

        def call(method: str, path: str, body: bytes = b"") -> tuple[str, Any]:
            answer: list[str] = []
            environ = {
                "REQUEST_METHOD": method,
                "PATH_INFO": path,
                "CONTENT_LENGTH": str(len(body)),
                "wsgi.input": io.BytesIO(body),
            }
            out = b"".join(app(environ, lambda status, _headers: answer.append(status)))
            return answer[0], json.loads(out)

        status, doc = call("POST", "/tasks", b'{"title": "From the web", "metadata": {"n": 1}}')
        assert status == "201 Created"
        assert call("GET", f"/tasks/{doc['id']}") == (
            "200 OK",
            {"id": doc["id"], "stage": "draft", "title": "From the web"},
        )
        status, doc = call("POST", "/tasks", b'{"title": ""}')
        assert (status, doc["error"]) == (
            "400 Bad Request",
            "title must be a non-empty string, not ''",
        )
