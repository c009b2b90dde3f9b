"""``bench.serve_instr``: ``tracker serve`` under callgrind while a real worker drains.

The counts are not asserted (a benchmark, not a test); what is pinned is that the bench refuses
bad arguments by name and that a drain gives each of the server's threads a count per task.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.benchrun import run_bench

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.serve_instr", *args, timeout=550)


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    done = _bench("--ab", str(tmp_path))
    assert done.returncode == 2
    assert f"--ab {tmp_path}: not a source tree with tracker_client/serve" in done.stderr
    done = _bench("--tasks", "0")
    assert done.returncode == 2
    assert "--tasks and --concurrency: at least 1" in done.stderr


@pytest.mark.timeout(600)  # tracker serve's start-up under callgrind, ~50x slower
def test_a_drain_counts_each_thread_per_task() -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    done = _bench("--tasks", "30")
    assert done.returncode == 0, done.stderr
    rows = {
        line.split()[0]: float(line.split()[-1].replace(",", ""))
        for line in done.stdout.splitlines()
        if line.startswith(("loop ", "db "))
    }
    # the event loop (HTTP, JSON, routes) and the database thread both worked for the drain
    assert rows["loop"] > 10_000 and rows["db"] > 10_000, done.stdout
