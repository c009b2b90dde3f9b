"""``backlog-worker pipeline create|list|show`` against a real embedded rail."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import SIMPLE, Rail

FLAGS = [
    "--state", "draft=writer", "--state", "review=reviewer", "--terminal", "done",
    "--transition", "draft:submit:review", "--transition", "review:approve:done",
    "--transition", "review:reject:draft",
]  # fmt: skip


def test_create_from_flags_then_list_and_show(rail: Rail) -> None:
    result = rail.cli("pipeline", "create", "review", *FLAGS)
    assert result.exit_code == 0, result.output
    assert "created pipeline review" in result.stdout

    listed = rail.json("pipeline", "list")
    assert [p["name"] for p in listed] == ["review"]
    definition = listed[0]["definition"]
    assert definition["initial"] == "draft"
    assert definition["states"]["done"] == {"terminal": True}
    assert {"from": "review", "trigger": "reject", "to": "draft"} in definition["transitions"]

    table = rail.cli("pipeline", "list")
    assert table.exit_code == 0
    assert "review" in table.stdout
    assert "reviewer" in table.stdout

    shown = rail.cli("pipeline", "show", "review")  # by name
    assert shown.exit_code == 0, shown.output
    for word in ("draft", "writer", "terminal", "approve", "reject"):
        assert word in shown.stdout
    by_id = rail.json("pipeline", "show", listed[0]["id"])
    assert by_id["name"] == "review"


def test_create_from_json_and_toml_files(rail: Rail, tmp_path: Path) -> None:
    as_json = tmp_path / "p.json"
    as_json.write_text(json.dumps(SIMPLE))
    created = rail.json("pipeline", "create", "from-json", "--file", str(as_json))
    assert created["name"] == "from-json"

    as_toml = tmp_path / "p.toml"
    as_toml.write_text(
        'name = "from-toml"\n[definition]\ninitial = "a"\n'
        '[definition.states.a]\nagent_role = "r"\n[definition.states.b]\nterminal = true\n'
        '[[definition.transitions]]\nfrom = "a"\ntrigger = "go"\nto = "b"\n'
    )
    rail.json("pipeline", "create", "-f", str(as_toml))
    shown = rail.json("pipeline", "show", "from-toml")
    assert shown["definition"]["transitions"] == [{"from": "a", "trigger": "go", "to": "b"}]


def test_list_when_empty(rail: Rail) -> None:
    result = rail.cli("pipeline", "list")
    assert result.exit_code == 0
    assert "no pipelines yet" in result.stdout
    assert rail.json("pipeline", "list") == []


def test_missing_file_is_a_usage_error(rail: Rail, tmp_path: Path) -> None:
    result = rail.cli("pipeline", "create", "x", "--file", str(tmp_path / "nope.json"))
    assert result.exit_code == 2
    assert "pipeline file" in result.stderr
    assert "does not exist" in result.stderr


def test_invalid_json_file_names_line_and_column(rail: Rail, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "initial": "a",\n  "states": {,}\n}')
    result = rail.cli("pipeline", "create", "x", "--file", str(bad))
    assert result.exit_code == 2
    assert "is not valid JSON" in result.stderr
    assert "line 3" in result.stderr


def test_invalid_toml_file(rail: Rail, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("initial = \n")
    result = rail.cli("pipeline", "create", "x", "--file", str(bad))
    assert result.exit_code == 2
    assert "is not valid TOML" in result.stderr


def test_file_without_name_needs_one(rail: Rail, tmp_path: Path) -> None:
    path = tmp_path / "def.json"
    path.write_text(json.dumps(SIMPLE))
    result = rail.cli("pipeline", "create", "--file", str(path))
    assert result.exit_code == 2
    assert "has no 'name'" in result.stderr


def test_definition_error_names_the_broken_rule(tmp_path: Path) -> None:
    rail = Rail(tmp_path / "new.db")
    result = rail.cli(
        "pipeline", "create", "broken", "--state", "todo=coder", "--terminal", "done",
        "--transition", "todo:complete:donee",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "donee" in result.stderr
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not rail.path.exists()  # refused before any tracker was opened


def test_definition_must_be_an_object(rail: Rail, tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    result = rail.cli("pipeline", "create", "x", "--file", str(path))
    assert result.exit_code == 2
    assert "must be an object" in result.stderr


def test_bad_flag_shapes(rail: Rail) -> None:
    result = rail.cli("pipeline", "create", "x", "--state", "draft")
    assert result.exit_code == 2
    assert "NAME=ROLE" in result.stderr
    result = rail.cli("pipeline", "create", "x", "--state", "a=r", "--transition", "a-b")
    assert result.exit_code == 2
    assert "FROM:TRIGGER:TO" in result.stderr
    result = rail.cli("pipeline", "create", "x")
    assert result.exit_code == 2
    assert "--state" in result.stderr
    result = rail.cli("pipeline", "create", "--state", "a=r")
    assert result.exit_code == 2
    assert "missing pipeline NAME" in result.stderr


def test_duplicate_name_is_a_conflict(rail: Rail) -> None:
    rail.pipeline("dup")
    result = rail.cli("pipeline", "create", "dup", *FLAGS)
    assert result.exit_code == 1
    assert "dup" in result.stderr or "duplicate" in result.stderr


def test_show_unknown_pipeline_lists_known_ones(rail: Rail) -> None:
    rail.pipeline("simple")
    result = rail.cli("pipeline", "show", "nope")
    assert result.exit_code == 1
    assert "unknown pipeline 'nope'" in result.stderr
    assert "simple" in result.stderr
