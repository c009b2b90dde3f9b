"""``backlog-worker schedule add|list|show|pause|resume|remove`` on real rails.

An embedded file, and the same commands against a rail served by uvicorn on 127.0.0.1. Each bad
flag (cron, time zone, metadata, pipeline, a taken name) is a clear error naming it, and the
file is left byte for byte as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.cli.conftest import SIMPLE, Rail, invoke, served_in_thread
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.timeout(60)

ADD = ("schedule", "add", "nightly", "-p", "simple", "--cron", "0 3 * * *", "--title", "N")


def test_add_list_show_pause_resume_remove(simple: Rail) -> None:
    added = simple.json(*ADD, "--timezone", "Europe/Paris", "--metadata", '{"scope": "all"}')
    assert (added["name"], added["timezone"], added["missed"]) == (
        "nightly",
        "Europe/Paris",
        "skip",
    )
    assert added["metadata"] == {"scope": "all"}
    from datetime import datetime

    at = datetime.fromtimestamp(added["next_tick_ms"] / 1000, ZoneInfo("Europe/Paris"))
    assert (at.hour, at.minute) == (3, 0)
    table = simple.cli("schedule", "list")
    assert table.exit_code == 0 and "nightly" in table.stdout and "0 3 * * *" in table.stdout
    shown = simple.cli("schedule", "show", "nightly")
    assert "Europe/Paris" in shown.stdout and "active" in shown.stdout
    assert simple.json("schedule", "pause", "nightly")["paused"] is True
    assert "paused" in simple.cli("schedule", "list").stdout
    assert simple.json("schedule", "resume", "nightly")["paused"] is False
    removed = simple.cli("schedule", "remove", "nightly")
    assert removed.exit_code == 0 and "removed schedule nightly" in removed.stdout
    assert simple.json("schedule", "list") == []
    gone = simple.cli("schedule", "show", "nightly")
    assert gone.exit_code == 1 and "nightly" in gone.stderr and "not found" in gone.stderr


def test_catch_up_policy_is_stored(simple: Rail) -> None:
    assert simple.json(*ADD, "--missed", "catch_up")["missed"] == "catch_up"


@pytest.mark.parametrize(
    ("flags", "code", "says"),
    [
        (("--cron", "61 * * * *"), 2, "--cron"),
        (("--cron", "every night"), 2, "--cron"),
        (("--timezone", "Mars/Olympus"), 2, "--timezone: unknown time zone 'Mars/Olympus'"),
        (("--metadata", "[1]"), 2, "--metadata"),
        (("--metadata", "{nope"), 2, "--metadata"),
        (("--missed", "sometimes"), 2, "--missed"),
        (("-p", "nope"), 1, "unknown pipeline 'nope'"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    simple: Rail, flags: tuple[str, ...], code: int, says: str
) -> None:
    before = simple.path.read_bytes()
    result = simple.cli(*ADD, *flags)
    assert result.exit_code == code, result.output
    assert says in result.stderr, result.stderr
    assert simple.path.read_bytes() == before


def test_a_taken_name_is_refused_and_the_first_schedule_stays(simple: Rail) -> None:
    simple.json(*ADD)
    result = simple.cli(*ADD[:-1], "other title")
    assert result.exit_code == 1 and "'nightly' exists" in result.stderr
    assert [s["title"] for s in simple.json("schedule", "list")] == ["N"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A rail with the ``simple`` pipeline served by uvicorn on 127.0.0.1 in a thread."""

    async def setup(embedded: Tracker) -> None:
        await embedded.create_pipeline("simple", SIMPLE)

    with served_in_thread(tmp_path / "served.db", setup=setup) as url:
        yield url


def test_schedules_on_a_served_rail(served: str) -> None:
    added = invoke([*ADD, "--json", "--tracker", served])
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["cron"] == "0 3 * * *"
    bad = invoke([*ADD[:5], "--cron", "0 3 * *", "--title", "x", "--tracker", served])
    assert bad.exit_code == 2 and "--cron" in bad.stderr
    listed = invoke(["schedule", "list", "--json", "--tracker", served])
    assert [s["name"] for s in json.loads(listed.stdout)] == ["nightly"]
    assert invoke(["schedule", "remove", "nightly", "--tracker", served]).exit_code == 0
