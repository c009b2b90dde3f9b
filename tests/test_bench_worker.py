"""``bench.worker``'s same-run A/B switch: a real drain of another source tree beside this one.

The benchmark's figures are not asserted (a benchmark, not a test); what is pinned is that
``--ab ROOT`` runs the older tree's worker on a rail that tree seeded (both sides drain every
task) and that a ROOT which is not a source tree of this project is refused by name.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.benchrun import run_bench

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.worker", *args, timeout=240)


def test_ab_refuses_a_root_that_is_not_a_source_tree(tmp_path: Path) -> None:
    done = _bench("--ab", str(tmp_path), "--phases", "drain1")
    assert done.returncode == 2
    assert f"--ab {tmp_path}: not a source tree of this project" in done.stderr


@pytest.mark.timeout(300)
def test_ab_drains_with_both_trees_workers() -> None:
    # This tree stands in for the older one: both sides are real worker processes.
    # 2,000 tasks: the per-thread CPU is read in 10 ms clock ticks, and at 200 a database
    # thread's ~15 ms could read as 0 (a CI run did)
    done = _bench("--ab", str(ROOT), "--tasks", "2000", "--phases", "drain1", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    rows = re.findall(
        r"round 1 ([AB]) 1 process\(es\): \d+ tasks/s, \d+ us/task \(loop \d+, threads \d+\), "
        r"exit codes \[0\]",
        done.stdout,
    )
    assert sorted(rows) == ["A", "B"], done.stdout
    assert re.search(r"^1\s+\d+\s+\d+\s+[\d.]+\s+\d+\s+\d+\s+[\d.]+$", done.stdout, re.M), (
        done.stdout
    )
    # The CPU split by thread: a worker's event loop does most of it, and a drain on the
    # embedded rail keeps its database thread busy too.
    split = re.search(r"^1\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", done.stdout, re.M)
    assert split, done.stdout
    assert all(int(v) > 0 for v in split.groups()), done.stdout


@pytest.mark.timeout(120)
def test_a_drain_at_the_default_info_level_drains_every_task() -> None:
    done = _bench("--tasks", "100", "--phases", "drain1", "--log-level", "INFO")
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"drain 100 no-op tasks, 1 worker process\(es\).*exit codes \[0\]", done.stdout
    )


def test_an_unknown_log_level_is_refused_by_name() -> None:
    done = _bench("--phases", "drain1", "--log-level", "LOUD")
    assert done.returncode == 2
    assert "--log-level: invalid choice: 'LOUD'" in done.stderr
