"""``bench.worker_overhead``: the worker over a stub rail, in the plain and the batched shape.

The figures are not asserted (a benchmark, not a test); what is pinned is that both rail
shapes drain every task through a real :class:`~worker.daemon.Worker` (on the event loop asked:
asyncio, or uvloop as a worker chooses where it is installed), that ``--ab ROOT`` runs
the stub over that tree's worker beside this one's, and that a ROOT which is not a source tree
of this project is refused by name.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchrun import run_bench

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.worker_overhead", *args, timeout=120)


@pytest.mark.parametrize("rail", ["plain", "batched"])
def test_each_rail_shape_drains_through_a_worker(rail: str) -> None:
    done = _bench("--rail", rail, "--tasks", "200")
    assert done.returncode == 0, done.stderr
    assert re.search(
        rf"worker alone \({rail} rail, log level WARNING, (asyncio|uvloop)\), 200 no-op tasks, "
        r"concurrency 10: "
        r"\d+ tasks/s, [\d.]+ us CPU per task",
        done.stdout,
    ), done.stdout


def test_info_logs_each_run_as_a_worker_does() -> None:
    done = _bench("--rail", "batched", "--tasks", "200", "--log-level", "INFO")
    assert done.returncode == 0, done.stderr
    assert "(batched rail, log level INFO, " in done.stdout, done.stdout
    assert done.stderr == ""  # the lines go to /dev/null, not to the bench's output


def test_ab_runs_the_stub_over_both_trees_workers() -> None:
    done = _bench("--rail", "batched", "--tasks", "100", "--ab", str(ROOT), "--rounds", "1")
    assert done.returncode == 0, done.stderr
    assert sorted(re.findall(r"^round 1 ([AB]): worker alone", done.stdout, re.M)) == ["A", "B"]
    assert re.search(r"^us CPU per task A [\d.]+ B [\d.]+ \(A/B [\d.]+\)$", done.stdout, re.M)


def test_ab_refuses_a_root_that_is_not_a_source_tree(tmp_path: Path) -> None:
    done = _bench("--ab", str(tmp_path))
    assert done.returncode == 2
    assert f"--ab {tmp_path}: not a source tree of this project" in done.stderr


@pytest.mark.parametrize(
    "loop",
    [
        "asyncio",
        pytest.param(
            "uvloop",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed"
            ),
        ),
    ],
)
def test_the_stub_runs_on_the_event_loop_asked(loop: str) -> None:
    done = _bench("--rail", "batched", "--tasks", "100", "--event-loop", loop)
    assert done.returncode == 0, done.stderr
    assert f"(batched rail, log level WARNING, {loop}), 100 no-op tasks" in done.stdout, done.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.timeout(600)  # two drains under callgrind, ~50x slower than natively
def test_callgrind_counts_the_workers_instructions_per_task() -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench.worker_overhead"),
            *("--rail", "batched", "--tasks", "20", "--callgrind"),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert done.returncode == 0, done.stderr
    found = re.search(
        r"^tree .+: ([\d.]+)k instructions per task \(batched rail, auto loop; "
        r"20 tasks ([\d,]+), 60 tasks ([\d,]+)\)$",
        done.stdout,
        re.M,
    )
    assert found is not None, done.stdout
    # the larger drain counted more, and a no-op task costs the worker something
    assert int(found[3].replace(",", "")) > int(found[2].replace(",", ""))
    assert float(found[1]) > 0
