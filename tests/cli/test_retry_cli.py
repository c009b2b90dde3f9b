"""``task add`` and the default retry policy: bounded unless ``--max-attempts unlimited``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import SIMPLE, Rail


def test_a_task_without_retry_flags_gets_the_bounded_default(simple: Rail) -> None:
    task = simple.json("task", "show", simple.add("plain"))["task"]
    assert (task["max_attempts"], task["retry_delay_ms"]) == (5, 1000)


def test_max_attempts_alone_keeps_the_default_delay(simple: Rail) -> None:
    task = simple.json("task", "show", simple.add("ten", "--max-attempts", "10"))["task"]
    assert (task["max_attempts"], task["retry_delay_ms"]) == (10, 1000)


def test_unlimited_is_asked_for_by_name(simple: Rail) -> None:
    task_id = simple.add("forever", "--max-attempts", "unlimited")
    assert simple.json("task", "show", task_id)["task"]["max_attempts"] is None


def test_a_bad_attempt_count_is_a_usage_error(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", "--max-attempts", "lots")
    assert result.exit_code == 2
    assert "unlimited" in result.stderr


def test_pipeline_show_names_its_retry_policy(rail: Rail, tmp_path: Path) -> None:
    definition = {**json.loads(json.dumps(SIMPLE)), "retry": {"max_attempts": 3}}
    rail.pipeline("retrying", definition)
    shown = rail.cli("pipeline", "show", "retrying")
    assert shown.exit_code == 0, shown.output
    assert "max_attempts=3" in shown.stdout
    task_id = rail.add("t", pipeline="retrying")
    assert rail.json("task", "show", task_id)["task"]["max_attempts"] == 3
