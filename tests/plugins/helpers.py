"""Executor test helpers: pid liveness, polled with a deadline (never a blind sleep)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import anyio

PY = sys.executable


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has already died)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


async def wait_dead(pids: list[int], deadline_s: float = 10.0) -> list[int]:
    """Poll until every pid is gone or the deadline passes; returns the survivors."""
    end = time.monotonic() + deadline_s
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= end:
            return alive
        await anyio.sleep(0.02)


def kill_leftovers(pids: list[int]) -> None:
    """Test hygiene: never leave a process behind even when an assertion failed."""
    import signal

    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
