"""``bench.memory`` and the venvs it measures in (``bench.peers_venvs``).

The figures are not asserted (a benchmark, not a test). What is pinned: each system's venv is
made from only its own requirements, read from ``pyproject.toml`` (huey without redis-py, our
worker without the bench's peers); an unknown system, rail or peer is refused by name; and a
real measurement runs end to end (one real worker on this interpreter, ``--shared-venv``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bench import peers_venvs

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_each_peer_venv_holds_only_that_peer() -> None:
    assert peers_venvs.requirements("huey") == ["huey>=2.5,<4"]
    pgq = peers_venvs.requirements("pgqueuer")
    assert {peers_venvs._dist_name(r) for r in pgq} == {"pgqueuer", "asyncpg", "uvloop"}
    for peer in ("arq", "celery", "procrastinate"):
        names = {peers_venvs._dist_name(r) for r in peers_venvs.requirements(peer)}
        assert peer in names
        assert "huey" not in names
        assert "backlog-worker" not in names


def test_our_venv_holds_our_runtime_requirements_only() -> None:
    assert peers_venvs.requirements("ours") == PROJECT["dependencies"]
    postgres = peers_venvs.requirements("ours-postgres")
    assert postgres == [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["postgres"]]
    names = {peers_venvs._dist_name(r) for r in postgres}
    assert not names & {"huey", "redis", "pgqueuer", "pytest"}


def test_an_unknown_system_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"no venv for 'rq'; known: huey, pgqueuer"):
        peers_venvs.requirements("rq")


def _memory(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "bench.memory", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


def test_an_unknown_rail_or_peer_is_refused_by_name() -> None:
    done = _memory("--rail", "redis")
    assert done.returncode == 2
    assert "--rail 'redis': not a rail (embedded, served, postgres)" in done.stderr
    done = _memory("--peers", "celery")
    assert done.returncode == 2
    assert "--peers 'celery': not a measured peer (huey, pgqueuer)" in done.stderr
    done = _memory("--startup", "-1")
    assert done.returncode == 2
    assert "--startup must be 0 or more" in done.stderr


@pytest.mark.slow
def test_a_busy_worker_is_measured_end_to_end() -> None:
    done = _memory("--shared-venv", "--tasks", "20", "--no-profile", "--startup", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| embedded |")]
    assert len(rows) == 2, done.stdout  # its peak RSS, and its start-up
    start = rows[1].split(" | ")
    assert float(start[2].split()[0]) > 0  # CPU ms of a real start-up
    assert re.fullmatch(r"\d+ modules, \d+ ms", start[4].rstrip(" |")), rows[1]
    assert "the floor (interpreter" in done.stdout
    assert "by part (imported in this order" in done.stdout
    # each part with its MiB and its CPU ms to import (the project's own is never free)
    project = re.search(r"this project (\d+\.\d) / (\d+);", done.stdout)
    assert project is not None, done.stdout
    assert float(project.group(1)) > 0 and int(project.group(2)) > 0
    # what running added above an interpreter that imported the same modules, split, and the
    # threads it ran (the event loop's and the SQLite connection's at least)
    running = re.search(
        r"running, at the end .* anonymous \+(-?\d+\.\d) MiB .* file-backed \+(-?\d+\.\d) MiB"
        r" .*; threads at most (\d+)$",
        done.stdout,
        re.M,
    )
    assert running is not None, done.stdout
    assert float(running.group(1)) > 0 and int(running.group(3)) >= 2


@pytest.mark.slow
def test_the_profiled_run_splits_its_rss_by_stage() -> None:
    done = _memory("--shared-venv", "--tasks", "20", "--top", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    line = next((s for s in done.stdout.splitlines() if "by stage" in s), None)
    assert line is not None, done.stdout
    # every stage of the run, in order, each with its MiB and the part its imports brought
    labels = ["configuration read", "event loop started", "rail opened"]
    found = re.findall(r"(configuration read|event loop started|rail opened) \+(\d+\.\d) \(", line)
    assert [label for label, _ in found] == labels, line
    assert float(found[0][1]) > 0, line  # reading the configuration imports the worker
    assert re.search(r"registered, idle \+-?\d+\.\d, busy \+-?\d+\.\d$", line), line
