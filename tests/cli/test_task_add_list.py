"""``backlog-worker task add`` and ``task list`` against a real embedded rail."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Rail


def test_add_with_every_field(simple: Rail) -> None:
    upstream = simple.add("upstream")
    task_id = simple.add(
        "Write the changelog",
        "--description", "for 1.2", "--priority", "7", "--metadata", '{"repo": "web"}',
        "--max-attempts", "4", "--retry-delay", "1.5s", "--backoff", "exponential",
        "--max-retry-delay", "1m", "--dead-letter-stage", "dead", "--depends-on", upstream,
        "--assign", "agent-7", "--assigned-by", "ops", "--concurrency-key", "repo-web",
        "--queue-ttl", "1h", "--max-stale-attempts", "2",
    )  # fmt: skip
    shown = simple.json("task", "show", task_id)
    task = shown["task"]
    assert task["title"] == "Write the changelog"
    assert task["description"] == "for 1.2"
    assert task["priority"] == 7
    assert task["metadata"] == {"repo": "web"}
    assert task["max_attempts"] == 4
    assert task["retry_delay_ms"] == 1500
    assert task["dead_letter_stage"] == "dead"
    assert task["concurrency_key"] == "repo-web"
    assert task["expires_at_ms"] > task["created_at_ms"] + 3_500_000
    assert task["dependencies"] == [{"depends_on_task_id": upstream, "resolved": False}]
    assert [a["agent_id"] for a in task["assignments"] if a["active"]] == ["agent-7"]
    assert task["stage"] == "todo"


def test_add_prints_id_and_stage(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple", "hello")
    assert result.exit_code == 0, result.output
    assert "created task" in result.stdout
    assert "stage todo" in result.stdout


def test_metadata_from_file_and_absolute_deadline(simple: Rail, tmp_path: Path) -> None:
    meta = tmp_path / "meta.toml"
    meta.write_text('ticket = 42\nlabels = ["a"]\n')
    task_id = simple.add("t", "--metadata-file", str(meta), "--expires-at", "2099-01-01T00:00")
    task = simple.json("task", "show", task_id)["task"]
    assert task["metadata"] == {"ticket": 42, "labels": ["a"]}
    assert task["expires_at_ms"] > 4_000_000_000_000


def test_invalid_json_metadata(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", "--metadata", "{repo: web}")
    assert result.exit_code == 2
    assert "--metadata is not valid JSON" in result.stderr
    assert "column 2" in result.stderr
    assert simple.json("task", "list")["items"] == []


def test_metadata_and_metadata_file_conflict(simple: Rail, tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text("{}")
    both = ("-m", "{}", "--metadata-file", str(path))
    result = simple.cli("task", "add", "-p", "simple", "t", *both)
    assert result.exit_code == 2
    assert "not both" in result.stderr


def test_missing_metadata_file(simple: Rail, tmp_path: Path) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", "--metadata-file", "nope.json")
    assert result.exit_code == 2
    assert "metadata file 'nope.json' does not exist" in result.stderr


def test_bad_deadline_and_duration(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", "--expires-at", "tomorrow")
    assert result.exit_code == 2
    assert "--expires-at 'tomorrow'" in result.stderr
    result = simple.cli("task", "add", "-p", "simple", "t", "--retry-delay", "soon")
    assert result.exit_code == 2
    assert "not a duration" in result.stderr


def test_missing_title_or_pipeline(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple")
    assert result.exit_code == 2
    assert "missing TITLE" in result.stderr
    result = simple.cli("task", "add", "t")
    assert result.exit_code == 2
    assert "missing --pipeline" in result.stderr
    result = simple.cli("task", "add", "-p", "simple", "  ")
    assert result.exit_code == 2
    assert "TITLE is empty" in result.stderr


def test_unknown_pipeline(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "nope", "t")
    assert result.exit_code == 1
    assert "unknown pipeline 'nope'" in result.stderr


def test_unknown_dependency(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", "--depends-on", "no-such-task")
    assert result.exit_code == 1
    assert "no-such-task" in result.stderr or "not found" in result.stderr
    assert simple.json("task", "list")["items"] == []


def test_unknown_dead_letter_stage(simple: Rail) -> None:
    result = simple.cli("task", "add", "-p", "simple", "t", "--dead-letter-stage", "limbo")
    assert result.exit_code == 2
    assert "limbo" in result.stderr


def test_bulk_from_jsonl(simple: Rail, tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        '{"title": "one", "priority": 3}\n'
        "\n# a comment\n"
        '{"title": "two", "metadata": {"n": 2}, "max_attempts": 2, "retry_delay_ms": 10}\n'
        '{"title": "three", "pipeline": "simple"}\n'
    )
    created = simple.json("task", "add", "-p", "simple", "--from-file", str(path))
    assert len(created["ids"]) == 3
    items = simple.json("task", "list")["items"]
    assert [t["title"] for t in items] == ["one", "two", "three"]
    assert items[1]["max_attempts"] == 2
    assert items[1]["metadata"] == {"n": 2}


def test_bulk_from_stdin(simple: Rail) -> None:
    result = simple.cli(
        "task", "add", "-p", "simple", "--from-file", "-", input='{"title": "a"}\n{"title": "b"}\n'
    )
    assert result.exit_code == 0, result.output
    assert "created 2 tasks" in result.stdout


def test_bulk_bad_line_names_line_and_writes_nothing(simple: Rail, tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"title": "ok"}\n{"title": "broken",\n')
    result = simple.cli("task", "add", "-p", "simple", "--from-file", str(path))
    assert result.exit_code == 2
    assert "line 2: invalid JSON" in result.stderr
    assert simple.json("task", "list")["items"] == []


def test_bulk_errors_name_the_line(simple: Rail, tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    cases = {
        '{"title": "a", "prority": 1}': "unknown field 'prority'",
        '{"priority": 1}': "title",
        "[1]": "expected a JSON object",
        '{"title": "a", "pipeline": "nope"}': "unknown pipeline 'nope'",
    }
    for line, message in cases.items():
        path.write_text('{"title": "fine"}\n' + line + "\n")
        result = simple.cli("task", "add", "-p", "simple", "--from-file", str(path))
        assert result.exit_code in (1, 2), line
        assert message in result.stderr, (line, result.stderr)
    path.write_text("\n# nothing\n")
    result = simple.cli("task", "add", "-p", "simple", "--from-file", str(path))
    assert result.exit_code == 2
    assert "holds no tasks" in result.stderr
    result = simple.cli("task", "add", "--from-file", str(tmp_path / "absent.jsonl"))
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    path.write_text('{"title": "x"}\n')
    result = simple.cli("task", "add", "--from-file", str(path))
    assert result.exit_code == 2
    assert "no pipeline" in result.stderr
    result = simple.cli("task", "add", "-p", "simple", "--from-file", str(path), "--priority", "3")
    assert result.exit_code == 2
    assert "put the other fields in the file" in result.stderr
    assert simple.json("task", "list")["items"] == []


def test_backlog_full_names_role_depth_and_cap(tmp_path: Path) -> None:
    rail = Rail(tmp_path / "capped.db", "?max_backlog_depth=2")
    rail.pipeline()
    rail.add("one")
    rail.add("two")
    result = rail.cli("task", "add", "-p", "simple", "three")
    assert result.exit_code == 4
    assert "backlog of role 'coder' is full: 2 waiting, cap 2" in result.stderr
    path = tmp_path / "bulk.jsonl"
    path.write_text('{"title": "a"}\n')
    result = rail.cli("task", "add", "-p", "simple", "--from-file", str(path))
    assert result.exit_code == 4
    assert len(rail.json("task", "list")["items"]) == 2


def test_list_pages_filters_and_table(simple: Rail) -> None:
    ids = [simple.add(f"t{i}") for i in range(5)]
    first = simple.json("task", "list", "--limit", "2")
    assert [t["id"] for t in first["items"]] == ids[:2]
    assert first["next_cursor"]
    second = simple.json("task", "list", "--limit", "2", "--cursor", first["next_cursor"])
    assert [t["id"] for t in second["items"]] == ids[2:4]
    everything = simple.json("task", "list", "--limit", "2", "--all")
    assert [t["id"] for t in everything["items"]] == ids
    assert everything["next_cursor"] is None

    assert len(simple.json("task", "list", "--stage", "todo")["items"]) == 5
    assert simple.json("task", "list", "--stage", "done")["items"] == []
    assert len(simple.json("task", "list", "--pipeline", "simple")["items"]) == 5

    table = simple.cli("task", "list", "--limit", "2")
    assert table.exit_code == 0
    assert "t0" in table.stdout
    assert "more: --cursor" in table.stdout


def test_list_bad_cursor_and_limit(simple: Rail) -> None:
    result = simple.cli("task", "list", "--cursor", "garbage")
    assert result.exit_code == 2
    assert "cursor" in result.stderr
    result = simple.cli("task", "list", "--limit", "0")
    assert result.exit_code == 2


def test_list_unknown_pipeline(simple: Rail) -> None:
    result = simple.cli("task", "list", "--pipeline", "nope")
    assert result.exit_code == 1
    assert "unknown pipeline" in result.stderr


def test_json_output_is_parseable(simple: Rail) -> None:
    simple.add("x")
    result = simple.cli("task", "list", "--json")
    assert json.loads(result.stdout)["items"][0]["title"] == "x"


def test_brackets_in_user_text_print_as_is(simple: Rail) -> None:
    title = "fix [/] and [bold]this[/bold] [red"
    task_id = simple.add(title, "-m", '{"note": "[/x]"}')
    listed = simple.cli("task", "list")
    assert listed.exit_code == 0, listed.output
    assert "[/]" in listed.stdout
    shown = simple.cli("task", "show", task_id)
    assert shown.exit_code == 0, shown.output
    assert "[bold]this[/bold]" in shown.stdout
    assert "[/x]" in shown.stdout


def test_idempotency_key_makes_a_retried_add_safe(simple: Rail) -> None:
    first = simple.add("once", "--idempotency-key", "k-1")
    again = simple.add("once", "--idempotency-key", "k-1")
    assert first == again
    assert len(simple.json("task", "list")["items"]) == 1
    other = simple.cli("task", "add", "-p", "simple", "different", "--idempotency-key", "k-1")
    assert other.exit_code == 1
    assert "idempotency" in other.stderr


def test_deadline_as_epoch_milliseconds(simple: Rail) -> None:
    task_id = simple.add("t", "--expires-at", "4102444800000")
    assert simple.json("task", "show", task_id)["task"]["expires_at_ms"] == 4102444800000


def test_control_characters_in_user_text_are_shown_escaped(simple: Rail) -> None:
    task_id = simple.add("evil \x1b]0;pwned\x07 \x1b[31mred")
    for args in (("task", "list"), ("task", "show", task_id)):
        result = simple.cli(*args)
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.stdout
        assert "\\x1b[31mred" in result.stdout


def test_control_characters_in_error_messages_are_escaped(simple: Rail) -> None:
    result = simple.cli("task", "show", "no\x1b[2Jsuch")
    assert result.exit_code == 1
    assert "\x1b" not in result.stderr
    assert "no\\x1b[2Jsuch" in result.stderr
