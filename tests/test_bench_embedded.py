"""``bench.embedded``'s phase of worker batches: it drains every task, and its counts are the
rail's own (a ``finish_many`` and the next claim share one commit; no lease row is read for a
lease this process handed out). The speed figures are not asserted (a benchmark, not a test)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bench.embedded import _ab_batches, _batches, _count_done, _setup, main


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


def test_the_batch_phase_before_and_after_runs_each_tree_in_turn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--ab``: phase 4 in a process of each source tree (here this tree twice), alternating
    which goes first, each round printed and both sides' medians."""
    root = Path(__file__).resolve().parents[1]
    _ab_batches(root, 2, 30, 10, "NORMAL")
    out = capsys.readouterr().out
    rounds = [line for line in out.splitlines() if line.startswith("round ")]
    assert [line.split(":")[0] for line in rounds] == [
        "round 1 A",
        "round 1 B",
        "round 2 B",
        "round 2 A",
    ]
    assert "database thread us/task A" in out and "B/A" in out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--phases", "1,5"], "--phases: choose among 1,2,3,4"),
        (["--phases", "x"], "--phases must be comma-separated"),
        (["--ab", "/nonexistent"], "not a source tree of this project"),
    ],
)
def test_bad_options_are_named(
    argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["bench.embedded", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert named in capsys.readouterr().err
