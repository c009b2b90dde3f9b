"""Upgrading one host at a time: a worker of the previous release and one of this tree drain one
rail together, with nothing lost and nothing run twice (docs/operate/upgrades.md).

The previous release is built from the clone's own history (tests/upgrade/previous.py). On each
rail (an embedded file, the same file served by this tree's ``tracker serve``, PostgreSQL) this
tree's worker opens the rail first (so whatever schema change it brings is made), then the old
worker starts beside it (as a host not yet upgraded restarts), and both drain the tasks; each
task must be done by exactly one completed run, and each worker must have done some.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import anyio
import pytest

from tests.remote.fixtures import wait_listening
from tests.upgrade.previous import Release
from tests.worker.daemonkit import (
    HOLD_JOB,
    R_PIPELINE,
    clean_env,
    python_config,
    reap,
    wait_for,
)
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TASKS = 300


async def _seed(url: str) -> None:
    tracker = await open_tracker(url, create=True)
    try:
        pid = await tracker.create_pipeline("p", R_PIPELINE)
        await tracker.create_tasks(
            [TaskCreate(pipeline_id=pid, title=f"t{n}") for n in range(TASKS)]
        )
    finally:
        await tracker.aclose()


async def _runs(url: str, token: str | None) -> list[tuple[str, str, str]]:
    """(task id, run status, agent id) of every run, through this tree's tracker."""
    tracker = await open_tracker(url, api_token=token)
    out: list[tuple[str, str, str]] = []
    try:
        cursor = None
        while True:
            page = await tracker.list_tasks(limit=1000, cursor=cursor)
            for task in page.items:
                for run in await tracker.call("list_runs", task.id):
                    out.append((task.id, run.status, run.agent_id))
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor
    finally:
        await tracker.aclose()


def _spawn(
    argv: list[str], config: Path, log: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [*argv, "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            cwd=config.parent,
            start_new_session=True,
        )


def _config(tmp: Path, url: str, agent: str, name: str, token: str | None) -> Path:
    path = python_config(tmp, url, "drainjob:run", "drain = true", concurrency=4)
    text = path.read_text().replace("[worker]\n", f'[worker]\nagent_id = "{agent}"\n', 1)
    if token is not None:
        text = text.replace("[tracker]\n", f'[tracker]\napi_token = "{token}"\n', 1)
    target = tmp / f"{name}.toml"
    target.write_text(text)
    return target


def _drain_together(tmp: Path, url: str, previous: Release, token: str | None = None) -> None:
    (tmp / "drainjob.py").write_text(HOLD_JOB)
    env = clean_env(PYTHONPATH=os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]))
    new_cfg = _config(tmp, url, "new-host", "new", token)
    old_cfg = _config(tmp, url, "old-host", "old", token)
    (tmp / "hold").touch()
    new = _spawn([sys.executable, "-m", "worker"], new_cfg, tmp / "new.log", env)
    old = None
    try:
        # this tree's worker first: it opens (and migrates) the rail before the old one starts
        wait_for(lambda: _leased(url, token) > 0, 60, "this tree's worker holding a lease")
        old = _spawn(previous.cli(), old_cfg, tmp / "old.log", env)
        wait_for(
            lambda: old.poll() is not None or _agents_leasing(url, token) >= 2,
            90,
            "both releases holding leases",
        )
        assert old.poll() is None, (tmp / "old.log").read_text()[-3000:]
        assert _versions(url, token) == {"new-host": _this_version(), "old-host": previous.version}
        (tmp / "hold").unlink()
        assert new.wait(240) == 0, (tmp / "new.log").read_text()[-3000:]
        assert old.wait(240) == 0, (tmp / "old.log").read_text()[-3000:]
    finally:
        reap(new)
        if old is not None:
            reap(old)
    runs = anyio.run(_runs, url, token)
    completed = [task for task, status, _agent in runs if status == "completed"]
    assert len(completed) == TASKS and len(set(completed)) == TASKS  # none lost, none twice
    by_agent = {agent for _task, status, agent in runs if status == "completed"}
    assert by_agent == {"new-host", "old-host"}


def _leased(url: str, token: str | None) -> int:
    return _agents_leasing(url, token, count_tasks=True)


def _agents_leasing(url: str, token: str | None, *, count_tasks: bool = False) -> int:
    async def go() -> int:
        tracker = await open_tracker(url, api_token=token)
        try:
            workers = await tracker.call("list_workers")
            running = [w for w in workers if w.running]
            if count_tasks:
                return sum(len(w.running) for w in running)
            return len({w.agent_id for w in running})
        finally:
            await tracker.aclose()

    return anyio.run(go)


def _this_version() -> str:
    from importlib.metadata import version

    return version("backlog-worker")


def _versions(url: str, token: str | None) -> dict[str, str]:
    """agent id -> the version each live worker registered with."""

    async def go() -> dict[str, str]:
        tracker = await open_tracker(url, api_token=token)
        try:
            return {w.agent_id: w.version for w in await tracker.call("list_workers")}
        finally:
            await tracker.aclose()

    return anyio.run(go)


def test_both_releases_drain_one_embedded_rail(previous: Release, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/rail.db"
    anyio.run(_seed, url)
    _drain_together(tmp_path, url, previous)
    with closing(sqlite3.connect(tmp_path / "rail.db")) as conn:
        (done,) = conn.execute("SELECT count(*) FROM tasks WHERE stage = 'done'").fetchone()
    assert done == TASKS


@contextmanager
def _served(tmp: Path, db: Path, token: str) -> Iterator[str]:
    (tmp / "admin.token").write_text(token + "\n")
    log = tmp / "serve.log"
    argv = [sys.executable, "-m", "worker", "tracker", "serve", "--tracker", f"sqlite:///{db}"]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [*argv, "--port", "0", "--token-file", str(tmp / "admin.token")],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=clean_env(),
        )
    try:
        yield wait_listening(log, proc, 60)
    finally:
        proc.terminate()
        proc.wait(30)


def test_both_releases_drain_one_served_rail(previous: Release, tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    anyio.run(_seed, f"sqlite:///{db}")
    token = uuid.uuid4().hex + uuid.uuid4().hex
    with _served(tmp_path, db, token) as url:
        _drain_together(tmp_path, url, previous, token=token)


def test_both_releases_drain_one_postgresql_rail(previous: Release, tmp_path: Path) -> None:
    from tests.postgres.server import fresh_schema_url, shared_server

    shared_server()
    url = fresh_schema_url(f"upgrade-{uuid.uuid4()}")
    anyio.run(_seed, url)
    _drain_together(tmp_path, url, previous)
