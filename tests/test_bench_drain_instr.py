"""``bench.drain_instr``: a real embedded drain's instructions per task under callgrind.

The figure is not asserted (a benchmark, not a test); what is pinned is that a drain of real
no-op tasks by ``python -m worker run`` is counted against an empty drain and the difference
printed per task, and that bad arguments are refused by name.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.benchrun import run_bench

ROOT = Path(__file__).resolve().parents[1]


def _bench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.drain_instr", *args, timeout=timeout)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.timeout(600)  # two worker runs under callgrind, ~50x slower than natively
def test_a_drain_is_counted_against_an_empty_one() -> None:
    # enough tasks that their count dwarfs what start-up varies by (a collection: ~18 M)
    done = _bench("--tasks", "300", timeout=540)
    assert done.returncode == 0, done.stderr
    found = re.search(
        r"^tree .+: empty drain ([\d,]+), 300 tasks ([\d,]+): ([\d.]+)k instructions per task$",
        done.stdout,
        re.M,
    )
    assert found is not None, done.stdout
    # the drain with tasks counted more than the empty one: each task cost the worker something
    assert int(found[2].replace(",", "")) > int(found[1].replace(",", ""))
    assert float(found[3]) > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "named"),
    [(("--tasks", "0"), "--tasks: at least 1"), (("--ab", "/nonexistent"), "not a source tree")],
)
def test_bad_arguments_are_refused_by_name(args: tuple[str, ...], named: str) -> None:
    done = _bench(*args, timeout=50)
    assert done.returncode == 2
    assert named in done.stderr
