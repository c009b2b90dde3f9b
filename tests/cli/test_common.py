"""Small pieces of the operator CLI plumbing: durations, error mapping, exception groups."""

from __future__ import annotations

import click
import pytest

from tracker_client.errors import (
    BacklogFull,
    Conflict,
    NotFound,
    TrackerCorrupt,
    TrackerUnavailable,
    ValidationFailed,
)
from tracker_client.urlmask import mask_url
from worker.cli.ops.common import (
    DurationType,
    describe,
    exit_code_for,
    fmt_age,
    unwrap_groups,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("1.5m", 90.0), ("500ms", 0.5), ("2h", 7200.0), ("1d", 86400.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert DurationType().convert(text, None, None) == seconds


def test_bad_duration_names_the_value() -> None:
    with pytest.raises(click.BadParameter, match="'soon' is not a duration"):
        DurationType().convert("soon", None, None)


def test_exit_codes_and_messages() -> None:
    full = BacklogFull("x", role="coder", depth=5, cap=5)
    assert exit_code_for(full) == 4
    assert describe(full) == (
        "backlog of role 'coder' is full: 5 waiting, cap 5; nothing was written"
    )
    down = TrackerUnavailable("connection refused")
    assert exit_code_for(down) == 3
    assert describe(down, "http://u:pw@127.0.0.1:7700") == (
        "tracker unreachable at http://u:***@127.0.0.1:7700: connection refused"
    )
    assert exit_code_for(ValidationFailed("bad")) == 2
    assert exit_code_for(TrackerCorrupt("not ours")) == 2
    assert exit_code_for(NotFound("gone")) == 1
    assert describe(Conflict("task changed", code="task_version_mismatch")) == (
        "task changed (task_version_mismatch)"
    )


def test_mask_url_keeps_urls_without_password() -> None:
    assert mask_url("http://127.0.0.1:7700") == "http://127.0.0.1:7700"


def test_exception_groups_are_unwrapped_to_the_tracker_error() -> None:
    def boom() -> None:
        raise ExceptionGroup("task group", [ValueError("noise"), NotFound("task 'x' not found")])

    with pytest.raises(NotFound, match="task 'x' not found"):
        unwrap_groups(boom)


def test_exception_groups_without_a_known_error_stay_groups() -> None:
    def boom() -> None:
        raise ExceptionGroup("task group", [ValueError("noise")])

    with pytest.raises(ExceptionGroup):
        unwrap_groups(boom)


def test_ages() -> None:
    assert fmt_age(None) == "-"
    assert fmt_age(4200) == "4.2s"
    assert fmt_age(192_000) == "3m12s"
    assert fmt_age(3_720_000) == "1h02m"


def test_event_summaries() -> None:
    from worker.cli.ops.task.show import event_summary

    transition = {"trigger": "reject", "from": "review", "to": "draft", "instructions": "fix"}
    assert event_summary("transition", transition) == "reject: review -> draft (fix)"
    retry = {"failed_attempts": 2, "retry_delay_ms": 30_000}
    assert event_summary("retry_scheduled", retry) == "failure #2; retry in 30.0s"
    dead = {"reason": "crash_loop", "from_stage": "draft", "dead_letter_stage": "dead"}
    assert event_summary("dead_letter", dead) == "crash_loop (from draft -> dead)"
    generic = {"returncode": 1, "signal": None, "stdout_tail": "", "stderr_tail": "boom\n"}
    assert event_summary("exit", generic) == "returncode=1 stderr_tail=boom"
    assert event_summary("note", "plain text") == "plain text"
