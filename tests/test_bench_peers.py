"""``bench.peers``, the same-run peer benchmark, run for real with tiny counts.

The figures are not asserted (a benchmark, not a test). What is pinned: huey and PgQueuer drain
every task beside this worker's embedded and PostgreSQL rails, on a PostgreSQL server at stock
durability whose settings the header prints with the machine, the load and each system's
settings, every worker's log level (``--log-level``) and, per row, the machine's idle share and
the workers' context switches; each of our rows names the best peer of its storage class;
``--kept`` measures the PostgreSQL rail with finished tasks kept and ``--pickup`` the
submit-to-start latency; bad options are refused by name. arq and Celery need
``redis-server``, which CI does not install: they are left to the benchmark's own runs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.benchrun import run_bench
from tests.needs import require_module
from tests.postgres.server import require_postgres

ROOT = Path(__file__).resolve().parents[1]
HINT = "pip install -e '.[test]' (the peers bench.peers measures)"

pytestmark = pytest.mark.slow


def _bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run_bench("bench.peers", *args, timeout=timeout)


@pytest.fixture
def peers() -> None:
    """huey, PgQueuer (with asyncpg) and PostgreSQL's binaries, or skip (fail in CI)."""
    for module in ("huey", "pgqueuer", "asyncpg"):
        require_module(module, HINT)
    require_postgres()


def _row(out: str, system: str, procs: int) -> list[str]:
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 3 and cells[0] == system and cells[2] == str(procs):
            return cells
    raise AssertionError(f"no row for {system} x{procs} in:\n{out}")


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("peers")
def test_huey_and_pgqueuer_drain_beside_our_rails_on_a_durable_server() -> None:
    done = _bench(
        "--tasks", "60", "--runs", "1", "--procs", "1",
        "--systems", "huey,pgqueuer,embedded,postgres",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "skipped" not in out, out
    server = next(line for line in out.splitlines() if line.startswith("PostgreSQL: "))
    for stock in ("fsync=on", "synchronous_commit=on", "full_page_writes=on"):
        assert stock in server, server
    assert re.search(r"machine: \d+ cores", out), out
    assert re.search(r"load average before: [\d.]+ [\d.]+ [\d.]+", out), out
    assert re.search(r"load average after: [\d.]+ [\d.]+ [\d.]+", out), out
    assert "- log level: WARNING for every worker, ours and the peers'" in out, out
    huey = next(line for line in out.splitlines() if line.startswith("- huey "))
    for setting in ("journal_mode=wal", "synchronous=NORMAL", "workers=10", "logging WARNING"):
        assert setting in huey, huey
    pgq = next(line for line in out.splitlines() if line.startswith("- pgqueuer "))
    assert "batch_size=10" in pgq and "logging WARNING" in pgq, pgq
    assert re.search(r"^calibration \(.*\): \d+-\d+ ms CPU, \d+-\d+ ms wall$", out, re.M), out
    for system, storage, peer in (
        ("huey", "SQLite", "huey"),
        ("pgqueuer", "PostgreSQL", "pgqueuer"),
        ("embedded", "SQLite", "huey"),
        ("postgres", "PostgreSQL", "pgqueuer"),
    ):
        cells = _row(out, system, 1)
        assert cells[1] == storage and cells[6] == peer, cells
        assert float(cells[3].split()[0]) > 0 and float(cells[7]) > 0, cells
        assert re.fullmatch(r"\d+ \[\d+-\d+\]", cells[11]), cells  # machine idle %
        assert re.fullmatch(r"[\d.]+ \[[\d.]+-[\d.]+\]", cells[12]), cells  # switches/task
    assert _row(out, "huey", 1)[7] == "1.00"


@pytest.mark.timeout(300)
def test_log_levels_are_measured_side_by_side_and_printed() -> None:
    require_module("huey", HINT)
    done = _bench(
        "--tasks", "30", "--runs", "1", "--procs", "1", "--systems", "huey,embedded",
        "--log-level", "info,warning",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "- log level: each system at each of INFO, WARNING, interleaved in every round" in out
    huey = next(line for line in out.splitlines() if line.startswith("- huey "))
    assert huey.endswith("logging INFO"), huey  # read on the interpreter huey's workers run on
    embedded = next(line for line in out.splitlines() if line.startswith("- embedded: "))
    assert "log_level INFO" in embedded, embedded
    for system in ("huey", "embedded"):
        for level in ("INFO", "WARNING"):
            assert float(_row(out, f"{system} log={level}", 1)[3].split()[0]) > 0
    assert "| system | procs | log level | tasks/s [range] | CPU us/task | x INFO tasks/s " in out
    first = r"^\| embedded \| 1 \| INFO \| \d+ \[\d+-\d+\] \| \d+ \| 1\.00 \| 1\.00 \|$"
    assert re.search(first, out, re.M), out
    assert re.search(r"^\| embedded \| 1 \| WARNING \| .* \| [\d.]+ \| [\d.]+ \|$", out, re.M), out


@pytest.mark.timeout(300)
def test_the_served_rows_say_what_tracker_serve_spent_per_task() -> None:
    # The CPU column counts worker processes only; each served row's server is measured too,
    # in the round's line and under the table, with its event loop's share.
    done = _bench("--tasks", "200", "--runs", "1", "--procs", "1", "--systems", "served,embedded")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"round 1 served x1: .*, tracker serve \d+ us/task \(\d+ on its event loop\)$",
        done.stderr,
        re.M,
    ), done.stderr
    assert "tracker serve's own CPU per task (not in the CPU column above):" in done.stdout
    [line] = [x for x in done.stdout.splitlines() if x.startswith("- served x1: tracker serve")]
    total, low, high, loop = map(int, re.findall(r"\d+", line.split("tracker serve", 1)[1])[:4])
    assert low <= total <= high and 0 < loop <= total, line
    assert not [x for x in done.stdout.splitlines() if x.startswith("- embedded x1: tracker")]


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("peers")
def test_each_rail_runs_from_another_source_tree_in_the_same_rounds() -> None:
    # RAIL@TREE: that tree's seeding, server and workers (here this tree itself), in the same
    # rounds as this tree's, each row set beside the same best peer.
    tree = str(ROOT)
    systems = ["huey", "pgqueuer", *(f"{r},{r}@{tree}" for r in ("embedded", "served", "postgres"))]
    done = _bench("--tasks", "40", "--runs", "1", "--procs", "1", "--systems", ",".join(systems))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "skipped" not in out, out
    for rail, storage, peer in (
        ("embedded", "SQLite", "huey"),
        ("served", "SQLite", "huey"),
        ("postgres", "PostgreSQL", "pgqueuer"),
    ):
        assert f"- {rail}@{tree}: {rail}: " in out and f"source tree {tree}" in out, out
        for system in (rail, f"{rail}@{tree}"):
            cells = _row(out, system, 1)
            assert cells[1] == storage and cells[6] == peer, cells
            assert float(cells[3].split()[0]) > 0 and float(cells[7]) > 0, cells


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("peers")
def test_kept_measures_the_postgres_rail_with_finished_tasks_kept() -> None:
    done = _bench(
        "--tasks", "30", "--runs", "1", "--procs", "1", "--systems", "postgres",
        "--kept", "0,40",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "template kept_40_" in done.stderr and "40 finished tasks" in done.stderr
    rows = re.findall(
        r"^\| (0|40) \| 1 \| \d+ \[\d+-\d+\] \| \d+ \| ([\d.]+) \|$", done.stdout, re.M
    )
    assert [count for count, _ in rows] == ["0", "40"], done.stdout
    assert rows[0][1] == "1.00"


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("peers")
def test_pickup_latency_on_our_rails_and_pgqueuer() -> None:
    done = _bench("--pickup", "2", "--runs", "1", "--systems", "pgqueuer,embedded,postgres")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pickup latency (submit -> executor start, one idle worker): 2 samples" in done.stdout
    for system in ("pgqueuer", "embedded", "postgres"):
        found = re.search(rf"^\| {system} \| 2 \| ([\d.]+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$",
                          done.stdout, re.M)  # fmt: skip
        assert found, done.stdout
        assert 0 < float(found.group(1)) < 60_000


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("peers")
def test_pickup_compares_another_source_tree_of_the_postgres_rail() -> None:
    # postgres@TREE: that tree's worker and producer (here this tree itself), beside the
    # in-process one, in one run.
    tree = str(Path(__file__).resolve().parents[1])
    done = _bench("--pickup", "2", "--runs", "1", "--systems", f"postgres,postgres@{tree}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"source tree {tree}" in done.stdout
    for system in ("postgres", re.escape(f"postgres@{tree}")):
        found = re.search(rf"^\| {system} \| 2 \| ([\d.]+) \|", done.stdout, re.M)
        assert found, done.stdout
        assert 0 < float(found.group(1)) < 60_000


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("peers")
def test_pickup_samples_can_take_turns_across_systems() -> None:
    # --alternate: every system's idle worker at once, the samples in turns; no CPU table
    # (side by side, the CPU is no one system's).
    tree = str(Path(__file__).resolve().parents[1])
    done = _bench(
        "--pickup", "3", "--runs", "1", "--alternate", "--systems", f"postgres,postgres@{tree}"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for system in ("postgres", re.escape(f"postgres@{tree}")):
        found = re.search(rf"^\| {system} \| 3 \| ([\d.]+) \|", done.stdout, re.M)
        assert found, done.stdout
        assert 0 < float(found.group(1)) < 60_000
    assert "CPU per pickup" not in done.stdout


@pytest.mark.timeout(300)
def test_pickup_compares_another_source_tree_of_the_served_rail() -> None:
    # served@TREE: that tree seeds the rail file and runs tracker serve, the worker and the
    # producer (here this tree itself), beside this tree's, in one run.
    tree = str(Path(__file__).resolve().parents[1])
    done = _bench("--pickup", "2", "--runs", "1", "--systems", f"served,served@{tree}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"source tree {tree}" in done.stdout
    for system in ("served", re.escape(f"served@{tree}")):
        found = re.search(rf"^\| {system} \| 2 \| ([\d.]+) \|", done.stdout, re.M)
        assert found, done.stdout
        assert 0 < float(found.group(1)) < 60_000
    assert re.search(rf"^\| served@{re.escape(tree)} \| [\d.]+ \| [\d.]+ \|$", done.stdout, re.M)


@pytest.mark.timeout(300)
def test_pickup_compares_another_source_tree_of_the_embedded_rail() -> None:
    # embedded@TREE: that tree seeds the rail file and runs the worker and the producer (here
    # this tree itself), its samples in turns with this tree's.
    tree = str(Path(__file__).resolve().parents[1])
    done = _bench(
        "--pickup", "2", "--runs", "1", "--alternate", "--systems", f"embedded,embedded@{tree}"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"source tree {tree}" in done.stdout
    for system in ("embedded", re.escape(f"embedded@{tree}")):
        found = re.search(rf"^\| {system} \| 2 \| ([\d.]+) \|", done.stdout, re.M)
        assert found, done.stdout
        assert 0 < float(found.group(1)) < 60_000


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--systems", "postgres@/tmp"],
            "not a source tree of this project (no worker/__main__.py): postgres@/tmp",
        ),
        (["--systems", "huey@/tmp"], "unknown system(s) huey@/tmp; known: arq, "),
        (
            ["--pickup", "2", "--systems", "embedded@/tmp"],
            "not a source tree of this project (no worker/__main__.py): embedded@/tmp",
        ),
        (
            ["--pickup", "2", "--systems", "served@/tmp"],
            "not a source tree of this project (no worker/__main__.py): served@/tmp",
        ),
        (["--kept", "lots"], "--kept must be comma-separated integers, not 'lots'"),
        (["--kept", "-5"], "--kept: counts of finished tasks cannot be negative"),
        (["--pickup", "-1"], "--pickup: the number of samples cannot be negative"),
        (["--systems", "huey,rq"], "unknown system(s) rq; known: arq, celery, huey"),
        (["--procs", "1,x"], "--procs must be comma-separated integers, not '1,x'"),
        (["--log-level", "loud"], "--log-level: unknown level(s) LOUD; known: DEBUG, INFO"),
        (
            ["--log-level", "WARNING,INFO", "--kept", "10"],
            "--log-level: several levels measure the drains only, not --kept or --pickup",
        ),
    ],
)
def test_bad_options_are_refused_by_name(args: list[str], says: str) -> None:
    done = _bench(*args, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr, done.stderr
