"""``bench.pg_create``: real creator processes of two trees, interleaved, on a server of its own.

The benchmark's figures are not asserted (a benchmark, not a test); what is pinned is that each
tree's creator creates every task (the creator checks the rail holds them, else exits non-zero)
and a row per tree is printed, and that bad arguments are refused by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres.server import require_postgres

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.pg_create", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=200,
    )


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    done = _bench("--ab", str(tmp_path))
    assert done.returncode == 2
    assert f"--ab {tmp_path}: not a source tree with tracker_client/postgres" in done.stderr
    done = _bench("--tasks", "0")
    assert done.returncode == 2
    assert "--tasks, --concurrency and --rounds: at least 1" in done.stderr


@pytest.mark.timeout(240)
def test_both_trees_create_every_task() -> None:
    require_postgres()
    # This tree stands in for the older one: both sides are real creator processes.
    done = _bench("--tasks", "40", "--concurrency", "4", "--rounds", "1", "--ab", str(ROOT))
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines()]
    assert [r for r in rows if r.endswith(str(ROOT))] == [f"| this: {ROOT}", f"| ab: {ROOT}"]
