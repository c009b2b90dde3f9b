"""A concurrency key stays exclusive when the worker holding it is SIGKILLed mid-task.

Two real worker processes share one embedded SQLite rail; every task has the same
``concurrency_key``. Worker 1 is killed while its executor (and the executor's grandchild) runs;
worker 2 may take the task over only after the lease expired, and by then nothing of worker 1's
executor may still be running. Each executor checks that itself when it starts, under a lock on
the shared log: every earlier executor that did not log its end must be dead, grandchild
included, or it logs ``overlap``.
"""

from __future__ import annotations

import itertools
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.plugins.helpers import kill_leftovers, pid_alive
from tests.worker.test_orphans import seed, wait_for, worker_process, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: argv: LOG TITLE. The first executor ever sleeps until killed; the others run 0.3 s.
KEYED_SCRIPT = """\
import fcntl, os, subprocess, sys, time
log, title = sys.argv[1], sys.argv[2]
grandchild = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.05)"])

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False

with open(log, "a+") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    fh.seek(0)
    lines = [line.split() for line in fh.read().splitlines()]
    ended = {line[1] for line in lines if line[0] == "end"}
    first = not any(line[0] == "start" for line in lines)
    for line in lines:
        if line[0] == "start" and line[1] not in ended:
            for pid in line[1:3]:
                if alive(int(pid)):
                    fh.write(f"overlap {os.getpid()} {title} with {line[3]} pid {pid}\\n")
    fh.write(f"start {os.getpid()} {grandchild.pid} {title} {time.time()}\\n")
    fh.flush()
if first:
    while True:
        time.sleep(0.05)
time.sleep(0.3)
grandchild.kill()
grandchild.wait()
with open(log, "a") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    fh.write(f"end {os.getpid()} {title} {time.time()}\\n")
"""


def read_log(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def stages(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT stage, count(*) FROM tasks GROUP BY stage").fetchall()


async def test_a_key_stays_exclusive_across_a_sigkilled_worker(tmp_path: Path) -> None:
    db = tmp_path / "rail.db"
    await seed(db, 4, concurrency_key="repo-1")
    script = tmp_path / "keyed.py"
    script.write_text(KEYED_SCRIPT)
    log = tmp_path / "executors.log"
    argv = [sys.executable, str(script), str(log), "{task.title}"]
    configs = [
        write_config(tmp_path / f"worker{i}.toml", db, argv, ttl=3.0, concurrency=2) for i in (1, 2)
    ]
    killed: list[int] = []
    try:
        with worker_process(configs[0], "w1") as w1:
            wait_for(lambda: len(read_log(log)) == 1, 30, "worker 1 started an executor")
            [[_, pid, grandchild, *_]] = read_log(log)
            killed = [int(pid), int(grandchild)]
            with worker_process(configs[1], "w2") as w2:
                wait_for(
                    lambda: "worker_started" in (tmp_path / "w2.log").read_text(),
                    30,
                    "worker 2 started",
                )
                w1.send_signal(signal.SIGKILL)
                w1.wait(10)
                wait_for(lambda: stages(db) == [("done", 4)], 60, "worker 2 ran all four tasks")
                assert w2.poll() is None
    finally:
        kill_leftovers(killed)
    lines = read_log(log)
    assert [line for line in lines if line[0] == "overlap"] == []
    assert not any(pid_alive(p) for p in killed)
    # one start per run: the killed one (never ended) and four that ran to their end
    starts = [line for line in lines if line[0] == "start"]
    assert len(starts) == 5
    assert sorted(line[3] for line in starts[1:]) == ["t0", "t1", "t2", "t3"]
    # the runs that ended never overlapped either (the key admits one at a time)
    spans = {line[1]: [float(line[4])] for line in starts[1:]}
    for line in lines:
        if line[0] == "end":
            spans[line[1]].append(float(line[3]))
    ordered = sorted(spans.values())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ordered))
