"""``bench.capacity`` (docs/operate/capacity.md): end to end at a tiny scale against a real
PostgreSQL it starts itself, with real worker processes; and its arguments refused by name.

The figures are not asserted (a benchmark, not a test); the table's shape and that every
phase drained and was sampled are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import capacity
from tests.postgres.server import require_postgres

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_capacity_runs_end_to_end_and_prints_the_table() -> None:
    require_postgres()
    argv = [sys.executable, "-m", "bench.capacity", "--procs", "1,2", "--seconds", "1"]
    argv += ["--rate-guess", "100", "--pickup", "2"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("machine: ") for line in lines)
    assert any(line.startswith("load average before: ") for line in lines)
    assert any(line.startswith("load average after: ") for line in lines)
    assert any("max_connections=100" in line for line in lines)  # 2 x 11 + 20 fits
    at = lines.index(capacity.HEADER)
    rows = [line.strip("|").split("|") for line in lines[at + 2 :]]
    assert [int(r[0]) for r in rows] == [1, 2]
    columns = capacity.HEADER.count("|") - 1
    for r in rows:
        assert len(r) == columns
        assert int(r[1]) == 100  # drained: every seeded task (1 s x 100/s), none left
        assert float(r[2]) > 0  # tasks/s
        assert int(r[3]) >= int(r[0])  # at least one connection per worker
        assert float(r[4]) == pytest.approx(int(r[3]) / int(r[0]), abs=0.01)
        assert int(r[6]) == 2  # pickup samples taken
        assert float(r[7]) > 0


def test_max_connections_is_raised_when_the_workers_would_not_fit() -> None:
    assert capacity.connections_needed(64, 10) == 64 * 11 + capacity.HEADROOM
    assert capacity.connections_needed(2, 10) <= capacity.DEFAULT_MAX_CONNECTIONS


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--procs", "0"], "--procs '0': 0 is not in 1..512"),
        (["--procs", "x"], "--procs 'x': 'x' is not a whole number of worker processes"),
        (["--procs", "1,,2"], "'' is not a whole number"),
        (["--seconds", "0"], "'0' must be more than 0"),
        (["--pickup", "-1"], "--pickup: at least 0"),
        (["--pool-size", "0"], "--pool-size: 1..1000"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        capacity.main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
