"""Ctrl-C (SIGINT) on real ``backlog-worker`` processes: a clear line, the documented exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.conftest import Rail


def spawn(rail: Rail, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    return subprocess.Popen(
        [sys.executable, "-m", "worker", *args, "--tracker", rail.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _reap(proc: subprocess.Popen[str], *, group: bool = False) -> None:
    """Kill ``proc`` (``group``: its whole process group) if it still runs and close its pipes:
    a failed test leaks no process and no file (an unclosed pipe would fail whichever later
    test the garbage collector finds it in)."""
    if proc.poll() is None:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    proc.communicate()


def test_interrupted_submit_says_the_task_stays_queued(simple: Rail) -> None:
    proc = spawn(simple, "submit", "-p", "simple", "long wait", "--wait")
    try:
        deadline = time.monotonic() + 30
        while not simple.json("task", "list")["items"]:  # poll with a deadline: no sleep
            assert time.monotonic() < deadline, "submit never created its task"
            assert proc.poll() is None, proc.communicate()
        assert proc.stderr is not None
        assert "waiting for it to finish" in proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        _reap(proc)
    assert proc.returncode == 130, err
    task_id = simple.json("task", "list")["items"][0]["id"]
    assert f"interrupted; task {task_id} stays queued" in err
    assert "Traceback" not in err


def test_interrupted_watch_exits_zero(simple: Rail, tmp_path: Path) -> None:
    proc = spawn(simple, "queue", "--watch", "--interval", "50ms")
    try:
        assert proc.stdout is not None
        while "queue at" not in proc.stdout.readline():  # the first refresh is on screen
            assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        _reap(proc)
    assert proc.returncode == 0, err
    assert err.strip() == "stopped"


def _processes_mentioning(text: str, parent: int | None = None) -> list[int]:
    """Processes whose command line holds ``text``, optionally only ``parent``'s children.

    A worker's fork that has not exec'd its executor's command yet still shows the worker's own
    command line, so "the workers" are counted as the demo's direct children.
    """
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                # stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ")"
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if text in cmdline and (parent is None or ppid == parent):
                pids.append(int(entry.name))
    return pids


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_interrupted_demo_stops_its_workers(tmp_path: Path) -> None:
    keep = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    proc = subprocess.Popen(
        # 300 tasks: still busy when interrupted, however fast the machine
        [sys.executable, "-m", "worker", "demo", "--keep", str(keep), "--tasks", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # the signal reaches the demo only; it must stop its workers
    )
    try:
        assert proc.stdout is not None
        # "finished N/30" lines come from the monitor loop: every worker has been started.
        while not proc.stdout.readline().startswith("finished"):
            assert proc.poll() is None, proc.communicate()
        workers = _processes_mentioning(str(keep / "worker.toml"), parent=proc.pid)
        assert len(workers) == 3, "workers not running"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        _reap(proc, group=True)  # its workers too
    assert proc.returncode == 130, err
    assert "demo interrupted; its workers were stopped" in err
    assert _processes_mentioning(str(keep / "worker.toml")) == []
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
