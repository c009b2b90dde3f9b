"""``bench.pg_hot``: the grant's update of ``tasks`` against the same update of only the
columns no index reads.

The CPU figures are not asserted (a benchmark, not a test); what is pinned is that the grant's
update is never HOT and the other one is (the premise of the bound it prints), and that bad
arguments are refused by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.postgres.server import require_postgres

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.pg_hot", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=200,
    )


def test_bad_arguments_are_refused_by_name() -> None:
    done = _bench("--fillfactor", "5")
    assert done.returncode == 2
    assert "--fillfactor: 10-100" in done.stderr


def test_only_the_update_without_indexed_columns_is_hot() -> None:
    require_postgres()
    done = _bench("--tasks", "400", "--rounds", "1", "--fillfactor", "70")
    assert done.returncode == 0, done.stderr
    rows = {
        cells[0]: cells
        for line in done.stdout.splitlines()
        if line.startswith(("| grant |", "| hot |"))
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert set(rows) == {"grant", "hot"}, done.stdout
    assert float(rows["grant"][3]) == 0
    assert float(rows["hot"][3]) > 50
    assert float(rows["hot"][4]) < float(rows["grant"][4])  # WAL bytes per row
