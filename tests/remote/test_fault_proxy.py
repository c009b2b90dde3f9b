"""Two worker processes drain 300 tasks through a proxy that resets, delays and drops answers.

The served tracker runs in this test's event loop (uvicorn on 127.0.0.1); a fault-injecting proxy
sits between it and two real ``python -m worker run`` processes configured with
``tracker.url = "http://..."``. Dropped answers arrive *after* the server committed, so only the
idempotency keys (same key on every retry of a write, a fresh one per claim) keep the result
exactly-once: every task transitioned once, none lost, none stuck.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.faultproxy import FaultProxy
from tests.remote.fixtures import serve_on_port
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate
from tracker_client.serve.app import create_app

pytest.importorskip("worker.daemon")

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
TASKS = 300


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(
        f"""
[tracker]
url = "{url}"
retry_initial_s = 0.02
retry_max_s = 0.3

[tracker.options]
timeout_s = 5
retry_initial_s = 0.01
retry_max_wait_s = 0.2

[worker]
concurrency = 4
lease_ttl_s = 4
idle_min_s = 0.02
idle_max_s = 0.2
shutdown_grace_s = 5
maintenance_interval_s = 0.5
report_flush_s = 0.1

[[roles]]
name = "coder"
executor = "command"
[roles.options]
argv = ["{sys.executable}", "-I", "-S", "-c", "pass"]
"""
    )
    return path


def _query(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.anyio
async def test_two_workers_drain_300_tasks_exactly_once_through_a_faulty_proxy(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rail.db"
    embedded = await EmbeddedTracker.open(str(db))
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        pid = await embedded.create_pipeline("flow", PIPELINE)
        await embedded.create_tasks(
            [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(TASKS)]
        )
        async with serve_on_port(create_app(embedded)) as url:
            upstream = int(url.rsplit(":", 1)[1])
            proxy = FaultProxy(upstream, seed=4, reset_rate=0.04, drop_rate=0.04, delay_rate=0.2)
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, proxy.handle)
                config = _config(tmp_path, f"http://127.0.0.1:{port}")
                for i in range(2):
                    log = (tmp_path / f"worker-{i}.log").open("wb")
                    logs.append(log)
                    procs.append(
                        subprocess.Popen(
                            [
                                sys.executable,
                                "-m",
                                "worker",
                                "run",
                                "--config",
                                str(config),
                                "--agent-id",
                                f"w{i}",
                            ],
                            stdout=subprocess.DEVNULL,
                            stderr=log,
                        )
                    )
                with anyio.fail_after(180):
                    while True:
                        done = _query(db, "SELECT count(*) FROM tasks WHERE stage = 'done'")[0][0]
                        if done == TASKS:
                            break
                        for p in procs:
                            assert p.poll() is None, f"worker exited early ({p.returncode})"
                        await anyio.sleep(0.1)
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                with anyio.fail_after(60):
                    while any(p.poll() is None for p in procs):
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            await listener.aclose()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        await embedded.aclose()
    codes = [p.returncode for p in procs]
    assert codes == [0, 0], [(tmp_path / f"worker-{i}.log").read_text()[-3000:] for i in range(2)]
    # The proxy really did inject faults.
    assert proxy.stats["reset"] > 0 and proxy.stats["drop"] > 0 and proxy.stats["delay"] > 0
    # The workers used persistent connections (the served tracker advertises keep_alive), so
    # faults hit kept-alive connections mid-request too.
    assert proxy.stats["kept_alive"] > 0
    # Exactly once: every task done at version 2 with exactly one completed run; none running.
    per_task = _query(
        db,
        "SELECT t.id, t.task_version, sum(r.status = 'completed') FROM tasks t "
        "JOIN runs r ON r.task_id = t.id GROUP BY t.id",
    )
    assert len(per_task) == TASKS
    bad = [(tid, v, c) for tid, v, c in per_task if v != 2 or c != 1]
    assert bad == []
    assert _query(db, "SELECT count(*) FROM runs WHERE status = 'running'")[0][0] == 0
    transitions = _query(db, "SELECT count(*) FROM events WHERE kind = 'transition'")[0][0]
    assert transitions == TASKS
