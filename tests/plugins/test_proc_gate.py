"""No executor runs unguarded: a worker killed between spawn and registration leaves no program
running (plugins/proc/gate.py), and real SIGKILLs at random moments leave no late write.

The "worker" is a small Python driver running :func:`plugins.proc.process.run_process`; the
moment between spawn and registration is hit exactly by replacing the module's
``register_group`` with one that SIGKILLs the driver (before or after registering). Payloads write
a marker file; a marker written after the kill is an executor that escaped the guard.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plugins.proc.process import SpawnError, minimal_env, run_process
from tests.plugins.helpers import kill_leftovers, pid_alive

ROOT = Path(__file__).resolve().parents[2]

#: Kills itself in ``register_group`` (``before`` or ``after`` registering); prints the pgid.
DYING_DRIVER = """\
import os, signal, sys
import anyio
from plugins.proc import process
when, marker = sys.argv[1:3]
real = process.register_group

def dying(pgid):
    if when == "after":
        real(pgid)
    print(pgid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

process.register_group = dying
payload = "import sys; open(sys.argv[1], 'w').close()"

async def main():
    await process.run_process(
        [sys.executable, "-I", "-S", "-c", payload, marker],
        cwd=os.path.dirname(marker),
        env=process.minimal_env(),
    )

anyio.run(main)
"""


def gone_within(pid: int, seconds: float) -> bool:
    """Poll until ``pid`` is gone; False if still alive after ``seconds``."""
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_worker_killed_between_spawn_and_registration_runs_no_payload(
    tmp_path: Path, when: str
) -> None:
    marker = tmp_path / "payload-ran"
    done = subprocess.run(
        [sys.executable, "-c", DYING_DRIVER, when, str(marker)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    pgid = int(done.stdout)
    try:
        # before: the child sees the gate's EOF and exits; after: the guard kills its group
        assert gone_within(pgid, 5.0), f"executor {pgid} outlived its killed worker"
        assert not marker.exists(), "the payload ran although its worker died before it was guarded"
    finally:
        kill_leftovers([pgid])


#: Runs 4 executors at a time, for ever, each sleeping SLEEP s then writing a marker.
LOOP_DRIVER = """\
import os, sys
import anyio
from plugins.proc.process import minimal_env, run_process
out = sys.argv[1]
payload = (
    "import os, sys, time; time.sleep(float(sys.argv[2])); "
    "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()"
)

async def slot():
    while True:
        await run_process(
            [sys.executable, "-I", "-S", "-c", payload, out, sys.argv[2]],
            cwd=out, env=minimal_env(),
        )

async def main():
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(slot)
        print("ready", flush=True)

anyio.run(main)
"""

KILLS = 12
SLEEP_S = 0.4
#: A registered executor is killed by the guard within a few ms; a write this long after the
#: kill can only come from an executor that escaped it (its payload sleeps SLEEP_S first).
MARGIN_S = 0.2


def _payloads(out: Path) -> list[int]:
    """Pids of live payload processes of this test (their argv names ``out``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.fsencode(out) in argv and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.timeout(180)
def test_real_kills_at_random_moments_leave_no_executor_running(tmp_path: Path) -> None:
    rng = random.Random(7)
    escaped: list[str] = []
    for kill in range(KILLS):
        out = tmp_path / f"kill-{kill}"
        out.mkdir()
        driver = subprocess.Popen(
            [sys.executable, "-c", LOOP_DRIVER, str(out), str(SLEEP_S)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert driver.stdout is not None
            assert driver.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0.0, 2 * SLEEP_S))  # the kill's random moment (not a wait)
            driver.send_signal(signal.SIGKILL)
            killed_at = time.time()
            driver.wait(timeout=10)
            deadline = time.monotonic() + 5.0
            while (left := _payloads(out)) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not left, f"kill {kill}: executors {left} outlived their worker by 5 s"
            late = [p.name for p in out.iterdir() if p.stat().st_mtime > killed_at + MARGIN_S]
            escaped += [f"kill {kill}: {name}" for name in late]
        finally:
            driver.kill()
            driver.wait(timeout=10)
            if driver.stdout is not None:
                driver.stdout.close()
            kill_leftovers(_payloads(out))
    assert not escaped, f"executors wrote after their worker's kill: {escaped}"


@pytest.mark.anyio
async def test_a_gated_program_starts_as_a_direct_spawn_would(tmp_path: Path) -> None:
    """The trampoline leaves no trace in the program (coreutils, not Python, which would change
    the same things itself): no LC_CTYPE it was not given, SIGPIPE not ignored, no extra fd."""
    env = {k: v for k, v in minimal_env().items() if not k.startswith("LC_") and k != "LANG"}
    shown = await run_process(["env"], cwd=tmp_path, env=env)
    assert shown.stdout.decode().splitlines() == [f"{k}={v}" for k, v in env.items()]
    shown = await run_process(["env"], cwd=tmp_path, env={**env, "LC_CTYPE": "C"})
    assert "LC_CTYPE=C" in shown.stdout.decode().splitlines()
    status = await run_process(["cat", "/proc/self/status"], cwd=tmp_path, env=env)
    [ignored] = [ln for ln in status.stdout.decode().splitlines() if ln.startswith("SigIgn:")]
    assert not int(ignored.split()[1], 16) & (1 << (signal.SIGPIPE - 1)), ignored
    fds = await run_process(["ls", "/proc/self/fd"], cwd=tmp_path, env=env)
    assert fds.stdout.split() == [b"0", b"1", b"2", b"3"]  # 3: ls's own listing


@pytest.mark.anyio
async def test_a_missing_program_is_still_a_spawn_error(tmp_path: Path) -> None:
    with pytest.raises(SpawnError) as caught:
        await run_process(["no-such-program-here"], cwd=tmp_path, env=minimal_env())
    assert caught.value.reason == "not_found"
    script = tmp_path / "script"
    script.write_text("#!/bin/true\n")
    script.chmod(0o644)
    with pytest.raises(SpawnError) as caught:
        await run_process([str(script)], cwd=tmp_path, env=minimal_env())
    assert caught.value.reason == "not_executable"
