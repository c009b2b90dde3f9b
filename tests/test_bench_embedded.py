"""``bench.embedded``'s phase of worker batches: it drains every task, and its counts are the
rail's own (a ``finish_many`` and the next claim share one commit; no lease row is read for a
lease this process handed out). The speed figures are not asserted (a benchmark, not a test)."""

from __future__ import annotations

from pathlib import Path

import anyio

from bench.embedded import _batches, _count_done, _setup


def test_the_batch_phase_drains_every_task_at_one_commit_per_batch(
    tmp_path: Path, rail_logs_warnings_only: None
) -> None:
    path = str(tmp_path / "rail.db")
    anyio.run(_setup, path, 40, "NORMAL")
    counted = anyio.run(_batches, path, 10, True)
    assert counted["tasks"] == 40
    assert anyio.run(_count_done, path) == 40
    # the first claim alone, then each batch's reports with the next claim: 5 commits
    assert counted["commits"] == 5
    # per task: a run inserted and completed, the task leased and moved, one event; and a
    # few statements per batch (no read of the lease's row)
    assert counted["statements"] / 40 < 6.5
    assert counted["db_cpu"] > 0
