"""``bench.peers``' arithmetic and its readings of the machine, in process.

The Benchmarks page says how the table's figures are computed: each column a median over the
rounds, each ratio the median of per-round ratios against the best peer of the same storage
(the peer with the highest median tasks/s) in the same round, a round whose peer did not run
leaving no ratio. These tests pin that on results built by hand, where the median of the
ratios and the ratio of the medians differ, so a change of method shows. The machine's
readings (a calibration loop, the idle share, the worker processes' context switches) are
taken from the real machine and real child processes; a peer's settings line is read on the
interpreter its workers run on.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import peers_setup
from bench.peer_drains import PYTHONS, Result
from bench.peer_workers import LOG_LEVEL_ENV
from bench.peers import best_peer, calibration_line, ratio, system_settings, table
from bench.peers_levels import level_table, parse_levels, per_level


def _result(round_: int, tps: float, cpu: float = 100.0, rss: float = 20.0) -> Result:
    return {
        "round": round_,
        "done": 5000,
        "tasks_per_s": tps,
        "cpu_us_per_task": cpu,
        "peak_rss_mib": rss,
        "idle_pct": 10.0 * (round_ + 1),
        "switches_per_task": 0.5 + round_,
        "exit_codes": [0],
    }


def test_a_ratio_is_the_median_of_the_per_round_ratios() -> None:
    rows = [_result(0, 100), _result(1, 300), _result(2, 900)]
    base = [_result(0, 100), _result(1, 100), _result(2, 1800)]
    # per round 1.0, 3.0, 0.5: median 1.0; the ratio of the medians would be 300/100 = 3.0
    assert ratio(rows, base, "tasks_per_s") == 1.0


def test_a_round_whose_peer_did_not_run_or_read_zero_gives_no_ratio() -> None:
    rows = [_result(0, 100), _result(1, 300), _result(2, 900)]
    base = [_result(0, 50), _result(2, 0)]  # round 1 missing, round 2 read nothing
    assert ratio(rows, base, "tasks_per_s") == 2.0
    assert ratio(rows, [], "tasks_per_s") is None


def test_the_best_peer_is_the_one_with_the_highest_median_rate_of_its_storage() -> None:
    results = {
        # procrastinate's best round beats PgQueuer's, its median does not
        ("procrastinate", 1): [_result(0, 10), _result(1, 20), _result(2, 9000)],
        ("pgqueuer", 1): [_result(0, 3000), _result(1, 3000), _result(2, 3000)],
        ("postgres", 1): [_result(0, 8000), _result(1, 8000), _result(2, 8000)],  # not a peer
        ("huey", 2): [_result(0, 7000)],
    }
    assert best_peer(results, "PostgreSQL", 1) == "pgqueuer"
    assert best_peer(results, "SQLite", 1) is None  # huey ran with 2 processes only
    assert best_peer(results, "SQLite", 2) == "huey"


def _cells(lines: list[str], system: str, procs: int) -> list[str]:
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == system and cells[2] == str(procs):
            return cells
    raise AssertionError(f"no row for {system} x{procs} in {lines}")


def test_the_table_prints_medians_and_per_round_ratios_against_the_best_peer() -> None:
    results = {
        ("huey", 1): [
            _result(0, 1000, cpu=50, rss=20),
            _result(1, 4000, cpu=200, rss=24),
            _result(2, 2000, cpu=100, rss=22),
        ],
        ("embedded", 1): [
            _result(0, 1500, cpu=100, rss=40),
            _result(1, 2000, cpu=150, rss=48),
            _result(2, 2500, cpu=400, rss=44),
        ],
        ("arq", 1): [_result(0, 500), _result(1, 500), _result(2, 500)],
    }
    lines = table(argparse.Namespace(procs=[1], log_levels=["WARNING"]), results)
    assert lines[0].count("|") == lines[1].count("|") == 14, lines[:2]
    embedded = _cells(lines, "embedded", 1)
    assert embedded[:7] == ["embedded", "SQLite", "1", "2000 [1500-2500]", "44.0", "150", "huey"]
    # per round x huey: 1.5, 0.5, 1.25 -> 1.25 (2000/2000 = 1.00 from the medians)
    # CPU 2.0, 0.75, 4.0 -> 2.00; RSS 2.0, 2.0, 2.0 -> 2.00; x arq 3, 4, 5 -> 4.00
    assert embedded[7:11] == ["1.25", "2.00", "2.00", "4.00"]
    # the conditions: machine idle 10/20/30 %, switches 0.5/1.5/2.5 per task
    assert embedded[11:13] == ["20 [10-30]", "1.5 [0.5-2.5]"]
    huey = _cells(lines, "huey", 1)
    assert huey[6:11] == ["huey", "1.00", "1.00", "1.00", "4.00"]


def test_a_system_without_a_peer_of_its_storage_shows_no_ratio() -> None:
    results = {("postgres", 2): [_result(0, 3000)]}
    args = argparse.Namespace(procs=[2], log_levels=["WARNING"])
    cells = _cells(table(args, results), "postgres", 2)
    assert cells[6:11] == ["-", "-", "-", "-", "-"]


def test_the_calibration_loop_is_timed_in_cpu_and_wall_clock() -> None:
    cpu, wall = peers_setup.calibrate(200_000)
    assert cpu > 0 and wall > 0
    line = calibration_line([((47.2, 52.0), (48.9, 96.4)), ((46.6, 47.1), (47.0, 343.0))])
    assert line.endswith("47-49 ms CPU, 47-343 ms wall"), line
    assert f"{peers_setup.CALIBRATION_LOOPS:,} Python additions" in line


@pytest.mark.timeout(60)
def test_conditions_count_the_reaped_workers_switches_and_the_machine_idle_share() -> None:
    conditions = peers_setup.Conditions.start()
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nfor _ in range(200): time.sleep(0.001)"]
    )
    child.wait(30)
    idle, switches = conditions.stop()
    assert 0.0 <= idle <= 100.0
    assert switches >= 200, switches  # each sleep gives up the CPU: a voluntary switch
    # a child still running is not counted: only the reaped ones are
    again = peers_setup.Conditions.start()
    running = subprocess.Popen(
        [sys.executable, "-c", "import time\nfor _ in range(200): time.sleep(0.001)"]
    )
    try:
        assert again.stop()[1] == 0
    finally:
        running.wait(30)


def test_with_several_log_levels_each_row_is_set_beside_the_peer_at_its_own_level() -> None:
    results = {
        ("huey log=WARNING", 1): [_result(0, 10000), _result(1, 12000)],
        ("embedded log=WARNING", 1): [_result(0, 5000), _result(1, 9000)],
        ("huey log=INFO", 1): [_result(0, 5000), _result(1, 4000)],
        ("embedded log=INFO", 1): [_result(0, 2500), _result(1, 3000)],
    }
    args = argparse.Namespace(procs=[1], log_levels=["WARNING", "INFO"])
    lines = table(args, results)
    # rows by system, then level in the order asked
    assert [line.split("|")[1].strip() for line in lines[2:]] == [
        "huey log=WARNING",
        "huey log=INFO",
        "embedded log=WARNING",
        "embedded log=INFO",
    ]
    # embedded at INFO against huey at INFO: 0.5, 0.75 -> 0.62 (not against huey at WARNING)
    assert _cells(lines, "embedded log=INFO", 1)[6:8] == ["huey", "0.62"]
    assert _cells(lines, "embedded log=WARNING", 1)[6:8] == ["huey", "0.62"]  # 0.5, 0.75
    cost = level_table(["huey", "embedded"], ["WARNING", "INFO"], [1], results)
    assert cost[1].startswith("| system | procs | log level |") and "x WARNING tasks/s" in cost[1]
    # embedded at INFO against itself at WARNING: 0.5, 0.333 -> 0.42; CPU equal -> 1.00
    assert "| embedded | 1 | INFO | 2750 [2500-3000] | 100 | 0.42 | 1.00 |" in cost
    assert "| embedded | 1 | WARNING | 7000 [5000-9000] | 100 | 1.00 | 1.00 |" in cost


def test_each_level_reaches_the_workers_spawned_for_it() -> None:
    def runner(n: int, procs: int, concurrency: int) -> Result:
        seen = subprocess.run(
            [sys.executable, "-c", f"import os; print(os.environ['{LOG_LEVEL_ENV}'], "
             "os.environ['BACKLOG_WORKER_LOG_LEVEL'])"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return {"seen": seen.stdout.split()}

    saved = {k: os.environ.get(k) for k in (LOG_LEVEL_ENV, "BACKLOG_WORKER_LOG_LEVEL")}
    try:
        runners = per_level({"huey": runner}, ["INFO", "WARNING"])
        assert list(runners) == ["huey log=INFO", "huey log=WARNING"]
        assert runners["huey log=WARNING"](1, 1, 1)["seen"] == ["WARNING", "WARNING"]
        assert runners["huey log=INFO"](1, 1, 1)["seen"] == ["INFO", "INFO"]
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("loud", "--log-level: unknown level(s) LOUD; known: DEBUG, INFO, WARNING, ERROR"),
        ("warning,,nope", "--log-level: unknown level(s) NOPE;"),
        (",", "--log-level: unknown level(s) ','"),
        ("info,INFO", "--log-level: a level is given twice in 'info,INFO'"),
    ],
)
def test_a_bad_log_level_is_named(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_levels(text)


def test_log_levels_are_read_in_order_whatever_their_case() -> None:
    assert parse_levels("warning, Info") == ["WARNING", "INFO"]


@pytest.mark.timeout(60)
def test_a_peers_settings_are_read_where_its_workers_run_and_a_failure_says_where(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(empty)], check=True)
    python = str(empty / "bin" / "python")
    PYTHONS["procrastinate"] = python  # a venv without procrastinate
    try:
        line = system_settings("procrastinate", 10)
    finally:
        del PYTHONS["procrastinate"]
    assert line.startswith(f"procrastinate: its settings could not be read on {python}: "), line
    assert "PackageNotFoundError" in line, line


def test_rounds_run_every_pair_of_neighbours_in_both_orders() -> None:
    """bench.peers' round order rotates and reverses every other round: a tree listed beside its
    older self (``postgres,postgres@OLD``) runs first in one round and second in the next."""
    from bench.peers import round_order

    names = ["huey", "embedded", "embedded@old", "postgres", "postgres@old"]
    orders = [round_order(names, run) for run in range(4)]
    assert all(sorted(order) == sorted(names) for order in orders)  # every system, once
    firsts = {order[0] for order in orders}
    assert len(firsts) > 1  # the round's first system changes
    for a, b in [("embedded", "embedded@old"), ("postgres", "postgres@old")]:
        before = [order.index(a) < order.index(b) for order in orders[:2]]
        assert before == [True, False]  # both orders within two rounds
