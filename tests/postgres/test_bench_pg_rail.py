"""``bench.pg_rail``: the rail's claims and reports alone, two trees interleaved.

The figures are not asserted (a benchmark, not a test); what is pinned is that each tree's run
drains every task (the run exits non-zero otherwise) and a row per tree is printed, that
``--callgrind`` counts the drain's instructions per task, and that bad arguments are refused by
name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres.server import require_postgres

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.pg_rail", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=500,
    )


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    done = _bench("--ab", str(tmp_path))
    assert done.returncode == 2
    assert f"--ab {tmp_path}: not a source tree with tracker_client/postgres" in done.stderr
    done = _bench("--rounds", "0")
    assert done.returncode == 2
    assert "--tasks and --rounds: at least 1" in done.stderr


def test_each_tree_drains_and_gets_a_row() -> None:
    require_postgres()
    done = _bench("--tasks", "40", "--rounds", "1", "--ab", str(ROOT))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(f"| {ROOT} |")]
    assert len(rows) == 2  # this tree and the same tree as --ab
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        claims, reports, total = (float(c) for c in cells[1:4])
        assert claims > 0 and reports > 0
        assert abs(total - (claims + reports)) < 0.2
        records, wal_bytes, btree = float(cells[7]), float(cells[8]), float(cells[10])
        assert records > btree > 0 and wal_bytes > records  # read back from the server's WAL


@pytest.mark.timeout(600)  # a worker's start-up and drain under callgrind, ~50x slower
def test_callgrind_counts_the_drain_per_task() -> None:
    require_postgres()
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    done = _bench("--tasks", "20", "--rounds", "1", "--callgrind")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(f"| {ROOT} |")]
    assert len(rows) == 1
    count = float(rows[0].strip("|").split("|")[1].replace(",", ""))
    # the drain alone: a claim and a report per task, not the process's start-up (~1,000 M)
    assert 10_000 < count < 50_000_000
