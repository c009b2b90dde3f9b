"""The executor guard on its own: a real owner process registers real process groups, then dies.

The owner is a small Python driver using :mod:`plugins.proc.guard` directly; the "executors" are
``sleep`` processes in sessions of their own. Survivors are SIGKILLed at teardown.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from plugins.proc.process import kill_deadline, minimal_env, run_process
from tests.plugins.helpers import kill_leftovers, pid_alive

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """\
import os, signal, subprocess, sys
from plugins.proc import guard as proc_guard
mode = sys.argv[1]
quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}  # our pipes stay ours
keep = subprocess.Popen(["sleep", "60"], start_new_session=True, **quiet)
victim = subprocess.Popen(["sleep", "60"], start_new_session=True, **quiet)
proc_guard.register_group(keep.pid)
proc_guard.register_group(victim.pid)
proc_guard.unregister_group(keep.pid)  # ended: the guard must leave that number alone
old = new = proc_guard.guard_pid()
if mode == "stuck":
    os.kill(old, signal.SIGSTOP)  # it stops reading: its pipe fills up
    while new == old:
        proc_guard.register_group(keep.pid)
        proc_guard.unregister_group(keep.pid)
        new = proc_guard.guard_pid()
print(keep.pid, victim.pid, old, new, flush=True)
if mode == "exit":
    sys.exit(0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def run_driver(mode: str) -> list[int]:
    """Run the driver until it dies; returns [keep, victim, first guard, last guard]."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == (0 if mode == "exit" else -signal.SIGKILL), done.stderr
    return [int(p) for p in done.stdout.split()]


def alive_after(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive once ``seconds`` passed (polling), or as soon as none is."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


@pytest.mark.parametrize("mode", ["kill", "exit"])
def test_the_guard_kills_registered_groups_when_its_owner_dies(mode: str) -> None:
    pids = run_driver(mode)
    keep, victim, guard = pids[:3]
    try:
        assert alive_after([victim, guard], 2.0) == []  # killed, and the guard is gone too
        assert pid_alive(keep), "an unregistered group was killed"
    finally:
        kill_leftovers(pids)


def test_a_stuck_guard_is_replaced_and_the_new_one_knows_the_running_groups() -> None:
    pids = run_driver("stuck")
    keep, victim, old, new = pids
    try:
        assert old != new
        assert alive_after([victim, old, new], 2.0) == []
        assert pid_alive(keep)
    finally:
        kill_leftovers(pids)


#: Ignores SIGTERM, says so, then sleeps: only SIGKILL ends it.
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.anyio
async def test_kill_deadline_cuts_the_sigterm_grace(tmp_path: Path) -> None:
    """Cancelled with a 30 s grace but a kill deadline 0.3 s away: SIGKILL by the deadline."""
    ready = anyio.Event()

    async def on_stdout(chunk: bytes) -> None:
        ready.set()

    async def run() -> None:
        await run_process(
            [sys.executable, "-c", STUBBORN],
            cwd=tmp_path,
            env=minimal_env(),
            on_stdout=on_stdout,
            term_grace_s=30.0,
        )

    cancelled_at = float("inf")  # set when the test cancels
    token = kill_deadline.set(lambda: cancelled_at + 0.3)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await ready.wait()
            cancelled_at = anyio.current_time()
            tg.cancel_scope.cancel()
    finally:
        kill_deadline.reset(token)
    assert anyio.current_time() - cancelled_at < 10  # not the 30 s grace (generous CI bound)
