"""Child processes started together: each says ``ready`` once it has opened the rail, then all
are told ``go`` at once, so none starts its work before every other one could (a race the
test wants, not one of start-up order)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

__all__ = ["reap", "release_together"]


def release_together(procs: Sequence[subprocess.Popen[str]]) -> None:
    """Wait for every child's ``ready`` line, then write ``go`` to each."""
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "ready\n", f"child said {line!r}: {proc.stderr and proc.stderr.read()}"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def reap(procs: Sequence[subprocess.Popen[str]]) -> None:
    """Kill the children still running (a test that failed midway) and collect every child's
    pipes, so none is left behind or holds its pipes open."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
