"""``backlog-worker purge --older-than AGE [--dry-run] [--pipeline P]`` on real rails.

The rail is seeded by a tracker whose clock stands ten days back, so the CLI (on the wall clock)
sees finished tasks ten days old without any waiting. Embedded file and served over 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.cli.conftest import SIMPLE, Rail, invoke, served_in_thread
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate

pytestmark = pytest.mark.timeout(60)

DAY_MS = 86_400_000


def _seed(path: Path, *, finished: int, waiting: int) -> None:
    """A ``simple`` pipeline with ``finished`` done and ``waiting`` open tasks, ten days old."""
    past = time.time_ns() // 1_000_000 - 10 * DAY_MS

    async def go() -> None:
        async with await EmbeddedTracker.open(str(path), clock=lambda: past) as tracker:
            pid = await tracker.create_pipeline("simple", SIMPLE)
            specs = [TaskCreate(pipeline_id=pid, title=f"t{n}") for n in range(finished)]
            await tracker.create_tasks(specs)
            while (lease := await tracker.claim("w", "coder", 60_000)) is not None:
                await tracker.add_event(lease, "progress", {"step": 1})
                await tracker.transition(lease, "complete")
            await tracker.create_tasks(
                [TaskCreate(pipeline_id=pid, title=f"open{n}") for n in range(waiting)]
            )

    anyio.run(go)


@pytest.fixture
def old(tmp_path: Path) -> Rail:
    """An embedded rail with 5 finished and 2 waiting tasks, all ten days old."""
    path = tmp_path / "old.db"
    _seed(path, finished=5, waiting=2)
    return Rail(path)


def test_dry_run_counts_and_writes_nothing(old: Rail) -> None:
    before = old.path.read_bytes()
    result = old.cli("purge", "--older-than", "7d", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "would purge 5 finished task(s)" in result.stdout
    assert "(5 run(s), 10 event(s)" in result.stdout  # a progress and a transition event each
    assert old.path.read_bytes() == before
    assert old.json("purge", "--older-than", "7d", "--dry-run")["tasks"] == 5


def test_purge_deletes_old_finished_tasks_only(old: Rail) -> None:
    assert old.cli("purge", "--older-than", "11d").stdout.startswith("purged 0 ")
    answer = old.json("purge", "--older-than", "7d", "--pipeline", "simple")
    assert (answer["tasks"], answer["runs"], answer["dry_run"]) == (5, 5, False)
    left = old.json("task", "list")["items"]
    assert sorted(t["title"] for t in left) == ["open0", "open1"]


@pytest.mark.parametrize(
    ("age", "says"),
    [
        ("-7d", "must be positive"),
        ("0d", "must be more than 0"),
        ("0", "not an age with a unit"),
        ("soon", "not an age with a unit"),
        ("7", "not an age with a unit"),
        ("1000000d", "at most 100 years"),
    ],
)
def test_a_bad_age_is_a_clear_error_and_nothing_is_written(old: Rail, age: str, says: str) -> None:
    before = old.path.read_bytes()
    result = old.cli("purge", f"--older-than={age}")
    assert result.exit_code == 2
    assert "--older-than" in result.stderr and says in result.stderr, result.stderr
    assert old.path.read_bytes() == before


def test_an_unknown_pipeline_is_named(old: Rail) -> None:
    result = old.cli("purge", "--older-than", "7d", "--pipeline", "nope")
    assert result.exit_code != 0
    assert "nope" in result.stderr
    assert old.json("task", "list")["total"] == 7


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The seeded rail served by uvicorn on 127.0.0.1 in a thread (no token); its URL."""
    path = tmp_path / "served.db"
    _seed(path, finished=3, waiting=1)
    with served_in_thread(path) as url:
        yield url


def test_purge_on_a_served_rail(served: str) -> None:
    dry = invoke(["purge", "--older-than", "7d", "--dry-run", "--json", "--tracker", served])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["tasks"] == 3
    real = invoke(["purge", "--older-than", "7d", "--tracker", served])
    assert real.exit_code == 0, real.output
    assert real.stdout.startswith("purged 3 finished task(s)")
    left = invoke(["task", "list", "--json", "--tracker", served])
    assert [t["title"] for t in json.loads(left.stdout)["items"]] == ["open0"]
