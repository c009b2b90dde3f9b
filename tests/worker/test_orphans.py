"""``kill -9`` of a real worker process leaves no executor behind: not its child, not a grandchild.

The worker runs ``python -m worker run`` on an embedded rail with a ``command`` executor; the
executor forks a grandchild and both sleep forever, writing their pids to a file first. After the
worker's SIGKILL every one of them must be gone within 2 s (a generous CI bound: the guard kills
at once when the worker's pipe reaches EOF).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins.helpers import kill_leftovers, pid_alive
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}

#: The executor: start a grandchild, publish both pids atomically, then sleep forever.
FORKING_SCRIPT = """\
import os, subprocess, sys, time
out = sys.argv[1]
grandchild = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.05)"])
with open(out + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {grandchild.pid}\\n")
os.replace(out + ".tmp", out)
while True:
    time.sleep(0.05)
"""


def worker_env() -> dict[str, str]:
    """The test's environment without BACKLOG_WORKER_* (a developer's settings must not leak)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}


def write_config(
    path: Path, db: Path, argv: list[str], *, ttl: float = 3.0, concurrency: int = 1
) -> Path:
    argv_toml = ", ".join(f'"{a}"' for a in argv)
    path.write_text(
        f"""
[tracker]
url = "sqlite:///{db}"

[worker]
concurrency = {concurrency}
lease_ttl_s = {ttl}
idle_min_s = 0.01
idle_max_s = 0.2
shutdown_grace_s = 2
maintenance_interval_s = 0.3
report_flush_s = 0.1
workdir = "{path.parent / "runs"}"

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = [{argv_toml}]
term_grace_s = 0.5
"""
    )
    return path


async def seed(db: Path, n: int, **fields: object) -> list[str]:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await tracker.create_pipeline("flow", PIPELINE)
        return await tracker.create_tasks(
            [TaskCreate(pipeline_id=pid, title=f"t{i}", **fields) for i in range(n)]  # type: ignore[arg-type]
        )
    finally:
        await tracker.aclose()


@contextlib.contextmanager
def worker_process(config: Path, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``worker run`` whose log goes to a file; SIGKILLed and reaped on the way out."""
    log = config.with_name(f"{name}.log")
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config), "--agent-id", name],
            stdout=subprocess.DEVNULL,
            stderr=fh,
            env=worker_env(),
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def wait_for(predicate: object, timeout: float, what: str) -> None:
    """Poll ``predicate()`` every 20 ms until true; fail naming ``what`` after ``timeout``."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout} s")
        time.sleep(0.02)


def alive_after(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive (zombies count as dead) once ``seconds`` passed, polling meanwhile."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


async def test_sigkill_of_the_worker_kills_its_executor_and_grandchild(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    await seed(db, 1)
    script = tmp_path / "forking.py"
    script.write_text(FORKING_SCRIPT)
    pidfile = tmp_path / "pids.txt"
    config = write_config(tmp_path / "worker.toml", db, [sys.executable, str(script), str(pidfile)])
    pids: list[int] = []
    try:
        with worker_process(config, "w1") as proc:
            wait_for(pidfile.exists, 30, "the executor wrote its pids")
            pids = [int(p) for p in pidfile.read_text().split()]
            assert len(pids) == 2 and all(pid_alive(p) for p in pids)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            assert alive_after(pids, 2.0) == [], "executor processes outlived the worker"
    finally:
        kill_leftovers(pids)
