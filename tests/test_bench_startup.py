"""``bench.startup``: a worker's start-up instructions attributed by stage, kind and module.

The figures are not asserted (a benchmark, not a test). What is pinned: the attribution gives
every instruction to exactly one owner (what was innermost when it ran), a concurrent stage
that ends out of order ends itself, an unknown rail is refused by name, and a real measurement
runs end to end under callgrind (one real worker on this interpreter, ``--shared-venv``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.startup import attribute, kinds, stages
from tests.needs import missing

ROOT = Path(__file__).resolve().parents[1]

EVENTS = [
    ["+", "worker.cli"],
    ["+", "DC:worker.cli"],
    ["-", "DC:worker.cli"],
    ["-", "worker.cli"],
    ["+", "S:rail opened"],
    ["+", "pydantic"],
    ["+", "PM:pydantic"],
    ["-", "PM:pydantic"],
    ["-", "pydantic"],
    ["-", "S:rail opened"],
    ["+", "S:health"],
    ["+", "S:register_worker"],
    ["-", "S:health"],  # concurrent tasks: the first call ends while the second still runs
    ["-", "S:register_worker"],
]
SEGMENTS = [100, 10, 20, 11, 5, 7, 30, 40, 3, 9, 2, 4, 6, 8, 50]


def test_every_instruction_has_exactly_one_owner() -> None:
    owned = attribute(EVENTS, SEGMENTS)
    assert sum(owned.values()) == sum(SEGMENTS)
    assert owned == {
        "<start>": 100,
        "worker.cli": 10 + 11,
        "DC:worker.cli": 20,
        "<top>": 5 + 2,
        "S:rail opened": 7 + 9,
        "pydantic": 30 + 3,
        "PM:pydantic": 40,
        "S:health": 4,
        "S:register_worker": 6 + 8,
        "<exit>": 50,
    }


def test_kinds_and_stages_add_up_to_the_total() -> None:
    by_kind = kinds(attribute(EVENTS, SEGMENTS))
    assert sum(by_kind.values()) == sum(SEGMENTS)
    assert by_kind["ours: dataclasses"] == 20
    assert by_kind["libraries: pydantic model classes"] == 40
    assert by_kind["run (own work, after imports)"] == 7 + 16 + 4 + 14
    by_stage = stages(EVENTS, SEGMENTS)
    assert sum(count for _, count in by_stage) == sum(SEGMENTS)
    assert [name for name, _ in by_stage] == [
        "interpreter start",
        "imports",
        "rail opened",
        "between stages (run command, event loop)",
        "health",
        "register_worker",
        "interpreter exit",
    ]


def test_events_that_do_not_match_the_segments_are_refused() -> None:
    with pytest.raises(ValueError, match="2 events but 2 segments"):
        attribute([["+", "a"], ["-", "a"]], [1, 2])
    with pytest.raises(ValueError, match="ends nothing open"):
        attribute([["-", "a"]], [1, 2])


def _startup(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKLOG_WORKER_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "bench.startup", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


def test_an_unknown_rail_is_refused_by_name() -> None:
    done = _startup("--rail", "served")
    assert done.returncode == 2
    assert "unknown rail 'served'; known: embedded, postgres" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_worker_start_up_is_measured_end_to_end() -> None:
    if shutil.which("valgrind") is None:
        missing("valgrind is not installed (apt-get install valgrind): bench.startup uses it")
    done = _startup("--shared-venv", "--top", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "M instructions (hooked; unhooked" in out
    for line in ("imports", "rail opened", "ping", "interpreter exit", "ours: dataclasses"):
        assert line in out, out
    assert "tracker_client.models" in out or "worker.config.models" in out
