"""``backlog-worker task add --delay/--at/--dedupe-key/--dedupe-window`` on a real embedded rail:
a delayed task is not claimable before its time and shows as scheduled in ``task show`` and
``queue``; a repeated dedupe key answers the same id; bad values are refused naming the flag,
writing nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.cli.conftest import Rail
from tracker_client.protocol import Tracker


def _claimable(simple: Rail) -> list[str]:
    async def claim_all(tracker: Tracker) -> list[str]:
        got = []
        while (lease := await tracker.claim("agent", "coder", 60_000)) is not None:
            got.append(lease.task.id)
        return got

    return simple.run(claim_all)


def test_delay_waits_and_shows_as_scheduled(simple: Rail) -> None:
    before = int(time.time() * 1000)
    task_id = simple.add("later", "--delay", "10m")
    task = simple.json("task", "show", task_id)["task"]
    assert before + 600_000 <= task["run_at_ms"] <= int(time.time() * 1000) + 600_000
    shown = simple.cli("task", "show", task_id)
    assert shown.exit_code == 0, shown.output
    assert "scheduled for" in shown.stdout
    queue = simple.cli("queue")
    assert queue.exit_code == 0, queue.output
    assert "scheduled (delayed, not due yet): coder 1" in queue.stdout
    coder = next(r for r in simple.json("queue")["roles"] if r["role"] == "coder")
    assert (coder["scheduled_count"], coder["claimable_count"]) == (1, 0)
    assert _claimable(simple) == []


def test_at_in_the_future_waits_and_in_the_past_is_due_now(simple: Rail) -> None:
    soon = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    late = simple.add("late", "--at", soon)
    past = simple.add("past", "--at", "2020-01-01T00:00:00+00:00")
    assert simple.json("task", "show", past)["task"]["run_at_ms"] == 1_577_836_800_000
    assert simple.json("task", "show", late)["task"]["next_eligible_at_ms"] > time.time() * 1000
    assert _claimable(simple) == [past]


def test_dedupe_key_answers_the_same_task(simple: Rail) -> None:
    first = simple.add("a", "--dedupe-key", "nightly", "--dedupe-window", "1h")
    again = simple.add("b", "--dedupe-key", "nightly")
    assert again == first
    assert len(simple.json("task", "list")["items"]) == 1
    assert simple.json("task", "show", first)["task"]["dedupe_key"] == "nightly"


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--delay", "-5m"), "--delay"),
        (("--delay", "soon"), "--delay"),
        (("--delay", "4000d"), "--delay is more than ten years"),
        (("--at", "tomorrow"), "--at 'tomorrow'"),
        (("--at", "2999-01-01T00:00"), "more than ten years ahead"),
        (("--delay", "1m", "--at", "2030-01-01T00:00"), "give --delay or --at, not both"),
        (("--dedupe-window", "1h"), "--dedupe-window needs --dedupe-key"),
        (("--dedupe-key", " "), "--dedupe-key is empty"),
    ],
)
def test_bad_values_name_the_flag_and_write_nothing(
    simple: Rail, flags: tuple[str, ...], named: str
) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", *flags)
    assert result.exit_code == 2, result.output
    assert named in result.stderr
    assert simple.json("task", "list")["items"] == []


def test_file_lines_may_carry_delay_and_dedupe_and_unknown_fields_are_refused(
    simple: Rail,
) -> None:
    path = simple.path.parent / "tasks.jsonl"
    path.write_text(
        '{"title": "a", "delay_ms": 60000, "dedupe_key": "k"}\n{"title": "b", "dedupe_key": "k"}\n'
    )
    ids = simple.json("task", "add", "-p", "simple", "--from-file", str(path))["ids"]
    assert len(ids) == 2 and ids[0] == ids[1]
    path.write_text('{"title": "c", "depends_on": ["x"]}\n')
    result = simple.cli("task", "add", "-p", "simple", "--from-file", str(path))
    assert result.exit_code == 2 and "unknown field 'depends_on'" in result.stderr
    assert len(simple.json("task", "list")["items"]) == 1
