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

from plugins.proc.guard import GUARD_NAME
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
            [TaskCreate(pipeline_id=pid, title=f"t{i}", **fields) for i in range(n)]
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


def _worker_children(worker: int, text: str) -> list[int]:
    """Direct children of ``worker`` whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == worker and text in cmdline:
            found.append(int(entry.name))
    return found


async def test_a_killed_guard_is_replaced_and_still_covers_running_executors(
    tmp_path: Path,
) -> None:
    """The guard is SIGKILLed while executor 1 runs; executor 2's start finds it gone, starts a new
    one and registers both groups with it: the worker's SIGKILL then still kills all four."""
    db = tmp_path / "rail.db"
    await seed(db, 1)
    script = tmp_path / "forking.py"
    script.write_text(FORKING_SCRIPT)
    argv = [sys.executable, str(script), str(tmp_path / "pids-{task.title}")]
    config = write_config(tmp_path / "worker.toml", db, argv, concurrency=2)
    pids: list[int] = []
    try:
        with worker_process(config, "w1") as proc:
            first = tmp_path / "pids-t0"
            wait_for(first.exists, 30, "executor 1 wrote its pids")
            pids += [int(p) for p in first.read_text().split()]
            [guard] = _worker_children(proc.pid, GUARD_NAME)
            os.kill(guard, signal.SIGKILL)
            wait_for(lambda: not pid_alive(guard), 10, "the guard died")
            tracker = await open_tracker(f"sqlite:///{db}")
            try:
                [pipeline] = await tracker.list_pipelines()
                await tracker.create_task(TaskCreate(pipeline_id=pipeline.id, title="t1"))
            finally:
                await tracker.aclose()
            second = tmp_path / "pids-t1"
            wait_for(second.exists, 30, "executor 2 wrote its pids")
            pids += [int(p) for p in second.read_text().split()]
            assert [g for g in _worker_children(proc.pid, GUARD_NAME) if pid_alive(g)] != []
            assert all(pid_alive(p) for p in pids)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            assert alive_after(pids, 2.0) == [], "executor processes outlived the worker"
    finally:
        kill_leftovers(pids)


#: A grandchild that moves to a process group of its own (same session): the guard's session
#: scan, not the group kill, must find it.
SETPGID_SCRIPT = FORKING_SCRIPT.replace(
    "grandchild = subprocess.Popen([", "grandchild = subprocess.Popen(process_group=0, args=["
)


async def test_sigkill_of_the_worker_kills_a_grandchild_in_another_group(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    await seed(db, 1)
    script = tmp_path / "setpgid.py"
    script.write_text(SETPGID_SCRIPT)
    pidfile = tmp_path / "pids.txt"
    config = write_config(tmp_path / "worker.toml", db, [sys.executable, str(script), str(pidfile)])
    pids: list[int] = []
    try:
        with worker_process(config, "w1") as proc:
            wait_for(pidfile.exists, 30, "the executor wrote its pids")
            pids = [int(p) for p in pidfile.read_text().split()]
            assert os.getpgid(pids[1]) == pids[1] != os.getpgid(pids[0])
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            assert alive_after(pids, 2.0) == [], "executor processes outlived the worker"
    finally:
        kill_leftovers(pids)


async def test_sigkill_of_a_nullclaw_worker_kills_nullclaw_and_its_children(
    tmp_path: Path,
) -> None:
    """The nullclaw executor spawns through the same path: the fake's "hang" mode starts a curl
    child and a shell-tool child (which survive their parent's death on their own)."""
    fake = tmp_path / "bin" / "nullclaw"
    fake.parent.mkdir()
    fake.write_text((Path(__file__).parents[1] / "nullclaw" / "fake_nullclaw.py").read_text())
    fake.chmod(0o755)
    db = tmp_path / "rail.db"
    await seed(db, 1)
    pidfile = tmp_path / "pids.txt"
    config = tmp_path / "worker.toml"
    write_config(config, db, ["unused"])
    text = config.read_text().split("[[roles]]")[0]
    config.write_text(
        text
        + f"""
[[roles]]
name = "coder"
executor = "nullclaw"
[roles.options]
binary = "{fake}"
provider = "fakellm"
model = "fake-model"
base_url = "http://127.0.0.1:9/v1"
env_passthrough = ["FAKE_NULLCLAW_*"]
kill_grace_s = 0.5
"""
    )
    env = {**worker_env(), "FAKE_NULLCLAW_MODE": "hang", "FAKE_NULLCLAW_PIDFILE": str(pidfile)}
    pids: list[int] = []
    try:
        log = tmp_path / "w1.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker", "run", "--config", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=fh,
                env=env,
            )
        try:
            wait_for(pidfile.exists, 30, "the fake nullclaw wrote its pids")
            pids = [int(line.split()[1]) for line in pidfile.read_text().splitlines()]
            assert len(pids) == 3 and all(pid_alive(p) for p in pids)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            assert alive_after(pids, 2.0) == [], "nullclaw processes outlived the worker"
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
    finally:
        kill_leftovers(pids)
