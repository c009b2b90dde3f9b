"""``bench.pg_peer``: the server's work per task, this rail's worker beside PgQueuer's.

The figures are not asserted (a benchmark, not a test); what is pinned is that each system's
drain finishes every task (the run exits non-zero otherwise), gets a row with the server's
counters read back (WAL, commits, statements), and that bad arguments are refused by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.needs import require_module
from tests.postgres.server import require_postgres

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.pg_peer", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    done = _bench("--systems", f"postgres@{tmp_path}")
    assert done.returncode == 2
    assert f"postgres@{tmp_path}: not a source tree with tracker_client/postgres" in done.stderr
    done = _bench("--systems", "pgqueuer@/tmp")
    assert done.returncode == 2
    assert "--systems: pgqueuer@/tmp? postgres, pgqueuer or postgres@TREE" in done.stderr


def test_each_system_drains_and_gets_its_server_figures() -> None:
    require_postgres()
    require_module("pgqueuer", "the dev extra: pip install -e '.[dev]'")
    done = _bench("--tasks", "40", "--rounds", "1", "--procs", "1")
    assert done.returncode == 0, done.stderr
    for system in ("postgres", "pgqueuer"):
        rows = [line for line in done.stdout.splitlines() if line.startswith(f"| {system} | 1 |")]
        assert len(rows) == 1, done.stdout
        cells = [float(c) for c in rows[0].strip("|").split("|")[2:13]]
        _rate, _server, worker, records, wal_bytes, _fpi, btree, commits = cells[:8]
        statements = cells[9]
        assert worker > 0
        assert records > btree > 0 and wal_bytes > records  # read back from the server's WAL
        assert commits > 0 and statements > 0
