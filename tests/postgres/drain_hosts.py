"""Worker-like child processes, as if on several hosts, draining one PostgreSQL rail (the
children are ``tests/postgres/_drain_proc.py``): started at once, one of them SIGKILLed
midway when the test wants a host lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.startline import reap, release_together

REPO = Path(__file__).resolve().parents[2]


def spawn(mode: str, url: str, agent: str) -> subprocess.Popen[str]:
    """A ``_drain_proc`` child in ``mode`` (``drain``: one lease at a time; ``drain_many``:
    batches) for ``agent`` on the rail at ``url``; it waits to be released."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.postgres._drain_proc", mode, url, agent],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def drain_losing_one(
    mode: str, url: str, workers: int, kill_after: int
) -> tuple[list[str], list[str]]:
    """``workers`` children in ``mode`` (agents ``host-0``…) released at once, the first
    SIGKILLed after its ``kill_after`` th line: (its lines, the others' lines)."""
    procs = [spawn(mode, url, f"host-{n}") for n in range(workers)]
    try:
        release_together(procs)
        victim = procs[0]
        assert victim.stdout is not None
        killed: list[str] = []
        while len(killed) < kill_after:
            line = victim.stdout.readline()
            assert line, f"the victim ended early: {victim.stderr and victim.stderr.read()}"
            killed.append(line.strip())
        os.kill(victim.pid, signal.SIGKILL)
        out, _ = victim.communicate(timeout=30)
        assert victim.returncode == -signal.SIGKILL
        killed += out.split()
        rest: list[str] = []
        for proc in procs[1:]:
            out, err = proc.communicate(timeout=150)
            assert proc.returncode == 0, err[-2000:]
            rest += out.splitlines()
        return killed, rest
    finally:
        reap(procs)
