"""``bench.steady``: each worker process's CPU split into start-up, drain and tail.

The figures are not asserted (a benchmark, not a test); what is pinned is that 1- and
2-process drains of real workers finish every task and print the three parts, which add up
to the total, and that ``--ab`` refuses a tree that is not this project's by name.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.benchrun import run_bench

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.steady", *args, timeout=150)


@pytest.mark.timeout(180)
def test_one_and_two_processes_split_their_cpu_into_three_parts() -> None:
    done = _bench("--tasks", "60", "--rounds", "1", "--procs", "1,2")
    assert done.returncode == 0, done.stderr
    rounds = re.findall(
        r"^round 1 \S+ x(\d): ([\d.]+) us/task = start-up ([\d.]+) \+ drain ([\d.]+) "
        r"\(loop [\d.]+, kernel [\d.]+\) \+ tail (-?[\d.]+); \d+ tasks/s$",
        done.stdout,
        re.M,
    )
    assert [r[0] for r in rounds] == ["1", "2"], done.stdout
    for _, total, startup, drain, tail in rounds:
        parts = float(startup) + float(drain) + float(tail)
        assert abs(parts - float(total)) <= 2, done.stdout  # each part rounded on its own
        assert float(startup) > 0 and float(drain) > 0, done.stdout


def test_ab_refuses_a_root_that_is_not_a_source_tree(tmp_path: Path) -> None:
    done = _bench("--ab", str(tmp_path))
    assert done.returncode == 2
    assert f"--ab {tmp_path}: not a source tree of this project" in done.stderr
