"""A real ``backlog-worker run`` process under a fake service manager (a notify socket).

READY after the tracker answered, STATUS with slot use, WATCHDOG pings (none while the event
loop is wedged), RELOADING/READY on SIGHUP, STOPPING and EXTEND_TIMEOUT_USEC while draining,
exit 0 after the second SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import worker.cli.run as run_cli
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(
        "sdnotify" not in Path(run_cli.__file__).read_text(),
        reason="worker/cli/run.py does not use worker.sdnotify yet (the daemon wiring of #7)",
    ),
]

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
REPO = Path(__file__).resolve().parents[2]


async def _seed(db: Path, n: int) -> None:
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pipeline = await tracker.create_pipeline("flow", PIPELINE)
        await tracker.create_tasks(
            [TaskCreate(pipeline_id=pipeline, title=f"t{i}") for i in range(n)]
        )
    finally:
        await tracker.aclose()


def _config(tmp_path: Path, db: Path, role_options: str, *, concurrency: int) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
log_format = "plain"

[tracker]
url = "sqlite:///{db}"

[worker]
concurrency = {concurrency}
lease_ttl_s = 3
idle_min_s = 0.01
idle_max_s = 0.2
shutdown_grace_s = 20
report_flush_s = 0.1

[[roles]]
name = "coder"
{role_options}
"""
    )
    return path


def _spawn(config: Path, notify_address: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "NOTIFY_SOCKET": notify_address,
        "WATCHDOG_USEC": "200000",  # a ping every 100 ms
        "PYTHONPATH": os.pathsep.join([str(REPO), *(p for p in sys.path if p)]),
    }
    env.pop("WATCHDOG_PID", None)
    with log.open("wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=fh,
            env=env,
            cwd=config.parent,
        )


def _stop(proc: subprocess.Popen[bytes], log: Path) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise AssertionError("worker did not exit; log:\n" + log.read_text()) from None


@pytest.mark.timeout(90)
async def test_ready_status_watchdog_reload_stop_sequence(tmp_path, path_receiver):
    db = tmp_path / "rail.db"
    await _seed(db, 2)
    config = _config(
        tmp_path,
        db,
        'executor = "command"\n[roles.options]\nargv = ["/bin/sleep", "60"]',
        concurrency=2,
    )
    log = tmp_path / "worker.log"
    proc = _spawn(config, path_receiver.address, log)
    try:
        started = path_receiver.recv_until(lambda m: m.startswith("READY=1"), timeout=30)
        busy = path_receiver.recv_until(
            lambda m: bool(re.search(r"^STATUS=.*\b2/2\b", m, re.M)), timeout=30
        )
        pings = path_receiver.recv_until(lambda m: m == "WATCHDOG=1", timeout=10)

        proc.send_signal(signal.SIGHUP)
        reload = path_receiver.recv_until(lambda m: m.startswith("RELOADING=1"), timeout=10)
        assert re.search(r"^MONOTONIC_USEC=\d+$", reload[-1], re.M), reload[-1]
        path_receiver.recv_until(lambda m: m.startswith("READY=1"), timeout=10)

        proc.send_signal(signal.SIGTERM)
        stopping = path_receiver.recv_until(lambda m: m.startswith("STOPPING=1"), timeout=10)
        extend = path_receiver.recv_until(
            lambda m: m.startswith("EXTEND_TIMEOUT_USEC="), timeout=10
        )
        usec = int(extend[-1].split("=", 1)[1].split("\n")[0])
        assert usec > 0
        # Draining: the tasks still run (sleep 60, grace 20), so a second signal ends it.
        assert proc.poll() is None
    finally:
        code = _stop(proc, log)
    assert code == 0, log.read_text()
    assert not any(m.startswith("READY=1") for m in started[:-1])
    assert busy and pings and stopping


@pytest.mark.timeout(90)
async def test_no_watchdog_pings_while_an_executor_wedges_the_loop(tmp_path, path_receiver):
    db = tmp_path / "rail.db"
    await _seed(db, 1)
    options = (
        'executor = "python"\n[roles.options]\n'
        'callable = "tests.systemd.wedge:block_the_loop"\n'
        f'notify = "{path_receiver.address}"\nseconds = 1.0'
    )
    config = _config(tmp_path, db, options, concurrency=1)
    log = tmp_path / "worker.log"
    proc = _spawn(config, path_receiver.address, log)
    try:
        before = path_receiver.recv_until(lambda m: m == "STATUS=wedge-start", timeout=30)
        during = path_receiver.recv_until(lambda m: m == "STATUS=wedge-end", timeout=30)
        after = path_receiver.recv_until(lambda m: m == "WATCHDOG=1", timeout=10)
    finally:
        code = _stop(proc, log)
    assert code == 0, log.read_text()
    assert "WATCHDOG=1" in before
    assert "WATCHDOG=1" not in during  # a second of wedged loop, ten intervals, no ping
    assert after[-1] == "WATCHDOG=1"
