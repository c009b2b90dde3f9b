"""``bench.transport``: the same-run grid of the served rail's HTTP plumbing really runs.

Its figures are not asserted (a benchmark, not a test); what is pinned is that every cell of
the grid drains every task through a real ``tracker serve`` (guarded, stock, and an older
tree's with ``--before``, this tree standing in for it), that every path's ratio is printed,
and that a ``--before`` which is not a source tree of this project is refused by name.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.benchrun import run_bench

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.transport", *args, timeout=240)


def test_before_refuses_a_directory_that_is_not_a_source_tree(tmp_path: Path) -> None:
    done = _bench("--before", str(tmp_path))
    assert done.returncode == 2
    assert f"--before {tmp_path}: not a source tree of this project" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_cell_drains_and_every_path_is_compared() -> None:
    done = _bench("--before", str(ROOT), "--tasks", "30", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    cells = re.findall(r"^(\w+/\w+)\s+\d+\s+\d+\s+-?\d+\s+\d+\s+[\d.]+$", done.stdout, re.M)
    assert sorted(cells) == sorted(
        f"{client}/{server}"
        for client in ("this", "before")
        for server in ("guarded", "stock", "before")
    ), done.stdout
    paths = re.findall(r"^(server|client): .*?(\d+\.\d\dx)", done.stdout, re.M)
    assert len(paths) == 7, done.stdout
    assert re.search(r"^load average \(1, 5, 15 min\): before [\d.]+", done.stdout, re.M)
    assert re.search(r"^machine: \d+ cores", done.stdout, re.M)
