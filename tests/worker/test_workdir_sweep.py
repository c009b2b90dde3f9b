"""Run directories left by a ``kill -9`` are swept when a worker starts, and those of runs a
live worker is running in the same base are kept (each run holds its directory with a lock).

Real ``backlog-worker run`` processes on one embedded rail file, sharing ``[worker] workdir``;
their command sleeps in its run directory until killed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.worker.daemonkit import (
    add_task,
    make_rail,
    reap,
    spawn_worker,
    wait_for,
    write_config,
)


def _run_dirs(base: Path) -> set[str]:
    return {p.name for p in base.iterdir() if p.name.startswith("run-")} if base.is_dir() else set()


@pytest.mark.timeout(120)
def test_a_starting_worker_sweeps_a_killed_workers_run_dirs_and_keeps_live_ones(
    tmp_path: Path,
) -> None:
    base = tmp_path / "runs"
    db = make_rail(tmp_path)
    config = write_config(
        tmp_path, f"sqlite://{db}", token=None, argv=["sleep", "60"], workdir=str(base)
    )
    procs = []
    try:
        add_task(db, "live")
        live = spawn_worker(config, tmp_path / "live.log")
        procs.append(live)
        [live_dir] = wait_for(lambda: _run_dirs(base), 30, "the live worker's run directory")
        add_task(db, "killed")
        killed = spawn_worker(config, tmp_path / "killed.log")
        procs.append(killed)
        [killed_dir] = wait_for(
            lambda: _run_dirs(base) - {live_dir}, 30, "the second worker's run directory"
        )
        (base / killed_dir / "partial-output").write_text("left behind\n")
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=10)
        assert _run_dirs(base) == {live_dir, killed_dir}  # nobody removed it: the leak
        fresh = spawn_worker(config, tmp_path / "fresh.log")
        procs.append(fresh)
        wait_for(
            lambda: (
                "removed 1 run directory left by a killed worker"
                in (tmp_path / "fresh.log").read_text()
            ),
            30,
            "the fresh worker's sweep",
        )
        assert not (base / killed_dir).exists()
        assert (base / live_dir).is_dir(), "a live run's directory was swept"
        assert "(1 held by live runs)" in (tmp_path / "fresh.log").read_text()
    finally:
        for proc in procs:
            reap(proc)


def test_the_sweep_leaves_other_entries_alone(tmp_path: Path) -> None:
    from worker.workdirs import sweep_stale_workdirs

    base = tmp_path / "runs"
    base.mkdir()
    (base / "run-stale").mkdir()
    (base / "run-stale" / "f").write_text("x")
    (base / "notes").mkdir()
    (base / "run-file").write_text("not a directory")
    (base / "run-link").symlink_to(tmp_path)
    assert sweep_stale_workdirs(base) == (1, 0)
    assert sorted(p.name for p in base.iterdir()) == ["notes", "run-file", "run-link"]
    assert sweep_stale_workdirs(tmp_path / "missing") == (0, 0)
