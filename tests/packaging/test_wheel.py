"""The wheel as a user gets it: built, checked, and installed with each extra into a fresh venv.

``python -m build`` makes the sdist and, from it, the wheel (once per session, :mod:`.conftest`).
``check-wheel-contents`` checks it as an index would, and its file list holds the three
packages with every data file they read (the SQL schemas, the dashboard's templates,
``py.typed``) and nothing else (no ``tests/``, ``bench/``, ``docs/``). Then each install runs a
command that needs it, in a venv holding only the wheel and what it declares, so an import
nobody declares fails here: the plain one ``--version``, ``--help``, ``demo``, the metrics
endpoint and the dashboard; ``postgres`` a rail on the suite's real PostgreSQL; ``otel`` a
traced run; ``docs`` the site generator; ``bench`` the peers it measures.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.packaging.conftest import ROOT, Built, Venvs, clean_env, run_in
from tests.remote.fixtures import wait_listening
from tests.worker.daemonkit import PIPELINE_TOML

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
PACKAGES = ("worker", "tracker_client", "plugins")
#: Present in the checkout, never in the wheel.
NEVER = ("tests/", "bench/", "docs/", "examples/", "contrib/", ".ci/")


def _data_files() -> set[str]:
    """Every file of the three packages in the checkout that is not Python source."""
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }


def _metadata(built: Built) -> str:
    [name] = [n for n in built.names() if n.endswith(".dist-info/METADATA")]
    return built.read(name)


def _flow(tmp_path: Path) -> Path:
    path = tmp_path / "flow.toml"
    path.write_text(PIPELINE_TOML)
    return path


def test_the_wheel_passes_check_wheel_contents(built: Built) -> None:
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "check_wheel_contents"),
            *("--config", str(ROOT / "pyproject.toml"), str(built.wheel)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK"), proc.stdout


def test_the_wheel_holds_the_packages_and_their_data_and_nothing_else(built: Built) -> None:
    names = built.names()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {*PACKAGES, f"backlog_worker-{PROJECT['version']}.dist-info"}, tops
    assert not [n for n in names if n.startswith(NEVER)]
    assert {f"{p}/py.typed" for p in PACKAGES} <= set(names)
    missing = _data_files() - set(names)
    assert missing == set(), f"data files of the packages not in the wheel: {sorted(missing)}"
    for schema in ("tracker_client/embedded/schema/", "tracker_client/postgres/schema/"):
        sql = [n for n in names if n.startswith(schema) and n.endswith(".sql")]
        assert len(sql) >= 7, (schema, sql)
    templates = [n for n in names if n.startswith("tracker_client/dashboard/templates/")]
    assert "tracker_client/dashboard/templates/base.html" in templates


def test_the_wheels_metadata_is_complete(built: Built) -> None:
    meta = _metadata(built)
    headers = meta.split("\n\n", 1)[0]

    def field(name: str) -> list[str]:
        return re.findall(rf"^{name}: (.*)$", headers, re.M)

    assert field("Name") == ["backlog-worker"]
    assert field("Version") == [PROJECT["version"]]
    assert field("Summary") and len(field("Summary")[0]) > 20
    assert field("Requires-Python") == [">=3.11"]
    assert field("License-Expression") == ["MIT"]
    assert field("License-File") == ["LICENSE"]
    assert field("Keywords")
    classifiers = field("Classifier")
    for wanted in ("Framework :: AnyIO", "Typing :: Typed", "Programming Language :: Python :: 3"):
        assert wanted in classifiers, classifiers
    assert any(c.startswith("Operating System ::") for c in classifiers), classifiers
    assert set(field("Provides-Extra")) >= {"postgres", "otel", "bench", "docs", "test"}
    assert field("Description-Content-Type") == ["text/markdown"]
    assert (
        "backlog_worker-0.1.0.dist-info/licenses/LICENSE".replace("0.1.0", PROJECT["version"])
        in built.names()
    )


def test_the_plain_install_runs_version_help_and_demo(venvs: Venvs, tmp_path: Path) -> None:
    venv = venvs.get("")
    where = run_in(venv, "python", "-c", "import worker; print(worker.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # not this checkout

    version = run_in(venv, "backlog-worker", "--version", cwd=tmp_path).stdout
    assert version.strip() == f"backlog-worker, version {PROJECT['version']}"
    assert "Commands:" in run_in(venv, "backlog-worker", "--help", cwd=tmp_path).stdout
    assert "copy" in run_in(venv, "backlog-worker", "rail", "--help", cwd=tmp_path).stdout
    demo = run_in(
        venv, "backlog-worker", "demo", "--tasks", "3", "--workers", "1", "--json", cwd=tmp_path
    )
    assert json.loads(demo.stdout)["tasks"] == 3, demo.stdout

    # really without the extras: their modules are absent, and a rail that needs one says so
    absent = "import importlib.util as u; print([m for m in ('psycopg', 'opentelemetry') "
    absent += "if u.find_spec(m)])"
    assert run_in(venv, "python", "-c", absent, cwd=tmp_path).stdout.strip() == "[]"
    refused = run_in(
        venv, "backlog-worker", "queue", "--tracker", "postgresql://x@127.0.0.1:1/x",
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "pip install 'backlog-worker[postgres]'" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_plain_install_serves_metrics_and_the_dashboard(venvs: Venvs, tmp_path: Path) -> None:
    venv = venvs.get("")
    rail = f"sqlite:///{tmp_path / 'rail.db'}"
    run_in(venv, "backlog-worker", "pipeline", "create", "-f", str(_flow(tmp_path)),
           "--tracker", rail, cwd=tmp_path)  # fmt: skip
    serve = [
        *("tracker", "serve", "--tracker", rail, "--port", "0"),
        *("--metrics-listen", "127.0.0.1:0"),
    ]
    with _served(venv, tmp_path, serve) as (_, log):
        found = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", log)
        assert found, log
        metrics = httpx.get(found.group(1), timeout=10)
        assert metrics.status_code == 200
        assert "backlog_" in metrics.text  # the prometheus-client exposition
    with _served(venv, tmp_path, ["dashboard", "--tracker", rail, "--port", "0"]) as (url, _):
        page = httpx.get(f"{url}/ui/", timeout=10, follow_redirects=True)
        assert page.status_code == 200
        assert "flow" in page.text  # the jinja2 templates, from the wheel


@contextmanager
def _served(venv: Path, tmp_path: Path, args: list[str]) -> Iterator[tuple[str, str]]:
    """A long-running ``backlog-worker ARGS`` of the venv: yields (the URL it announces once
    it listens, its log so far); ended by its pid (SIGTERM) on exit, without a traceback."""
    log = tmp_path / f"{args[0]}.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [str(venv / "bin" / "backlog-worker"), *args],
            stdout=subprocess.DEVNULL,
            stderr=fh,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            env=clean_env(venv),
        )
    try:
        url = wait_listening(log, proc, 30)
        yield url, log.read_text()
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=20)
    assert "Traceback" not in log.read_text(), log.read_text()


def test_the_postgres_extra_opens_a_rail_on_a_real_server(venvs: Venvs, tmp_path: Path) -> None:
    from tests.postgres.server import fresh_schema_url

    url = fresh_schema_url("packaging-wheel")
    venv = venvs.get("postgres")
    run_in(venv, "backlog-worker", "pipeline", "create", "-f", str(_flow(tmp_path)),
           "--tracker", url, cwd=tmp_path)  # fmt: skip
    run_in(venv, "backlog-worker", "task", "add", "-p", "flow", "one", "--tracker", url,
           cwd=tmp_path)  # fmt: skip
    queue = run_in(venv, "backlog-worker", "queue", "--tracker", url, "--json", cwd=tmp_path)
    assert '"coder"' in queue.stdout, queue.stdout


def test_the_otel_extra_traces_a_run(venvs: Venvs, tmp_path: Path) -> None:
    venv = venvs.get("otel")
    rail = f"sqlite:///{tmp_path / 'rail.db'}"
    run_in(venv, "backlog-worker", "pipeline", "create", "-f", str(_flow(tmp_path)),
           "--tracker", rail, cwd=tmp_path)  # fmt: skip
    added = run_in(venv, "backlog-worker", "task", "add", "-p", "flow", "one", "--json",
                   "--tracker", rail, cwd=tmp_path)  # fmt: skip
    task_id = json.loads(added.stdout)["id"]
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[tracker]\nurl = "{rail}"\n\n[tracing]\nenabled = true\n\n[[roles]]\nname = "coder"\n'
        f'executor = "command"\n[roles.options]\nargv = [{json.dumps(sys.executable)}, "-c", ""]\n'
    )
    checked = run_in(venv, "backlog-worker", "check", "--config", str(config), "--json",
                     cwd=tmp_path, check=False)  # fmt: skip
    tracing = [c for c in json.loads(checked.stdout)["checks"] if c["name"] == "tracing"]
    assert [c["level"] for c in tracing] == ["ok"], checked.stdout
    run_in(venv, "backlog-worker", "run", "--config", str(config), "--drain", cwd=tmp_path)
    shown = run_in(venv, "backlog-worker", "task", "show", task_id, "--json", "--tracker", rail,
                   cwd=tmp_path)  # fmt: skip
    names = {span["name"] for span in json.loads(shown.stdout)["spans"]}
    assert {"claim", "run", "executor", "report"} <= names, names


def test_the_docs_extra_installs_the_site_generator(venvs: Venvs, tmp_path: Path) -> None:
    venv = venvs.get("docs")
    plugins = "import material, mkdocs_gen_files, mkdocstrings, mkdocstrings_handlers.python"
    run_in(venv, "python", "-c", plugins, cwd=tmp_path)
    assert "version" in run_in(venv, "mkdocs", "--version", cwd=tmp_path).stdout


def test_the_bench_extra_installs_the_peers_it_measures(venvs: Venvs, tmp_path: Path) -> None:
    venv = venvs.get("bench")
    imports = "import arq, asyncpg, celery, huey, pgqueuer, procrastinate, psycopg, psycopg_pool"
    run_in(venv, "python", "-c", imports, cwd=tmp_path)
