"""``backlog-worker pipeline create|list|show`` against a real embedded rail."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cli.conftest import SIMPLE, Rail, invoke, served_in_thread
from worker.cli.ops.pipeline import definition_changes

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


@contextmanager
def _rail_url(kind: str, tmp_path: Path) -> Iterator[str]:
    """A fresh rail of ``kind``: an embedded file, one served over HTTP, a PostgreSQL schema."""
    if kind == "embedded":
        yield f"sqlite:///{tmp_path / 'rail.db'}"
    elif kind == "served":
        with served_in_thread(tmp_path / "served.db") as url:
            yield url
    else:
        from tests.postgres.server import fresh_schema_url

        yield fresh_schema_url(f"pipeline-create-{uuid.uuid4()}")


@pytest.mark.parametrize("kind", ["embedded", "served", "postgres"])
def test_create_is_idempotent_and_a_changed_definition_is_refused(
    kind: str, tmp_path: Path
) -> None:
    with _rail_url(kind, tmp_path) as url:
        first = invoke(["pipeline", "create", "review", *FLAGS, "--tracker", url, "--json"])
        assert first.exit_code == 0, first.output
        created = json.loads(first.stdout)
        assert created["unchanged"] is False

        # the same definition again, as a deploy script re-run would: nothing changes
        again = invoke(["pipeline", "create", "review", *FLAGS, "--tracker", url])
        assert again.exit_code == 0, again.output
        assert f"pipeline review {created['id']} unchanged" in again.stdout
        same = invoke(["pipeline", "create", "review", *FLAGS, "--tracker", url, "--json"])
        assert json.loads(same.stdout) == {**created, "unchanged": True}

        changed = [*FLAGS, "--transition", "draft:abandon:done"]
        refused = invoke(["pipeline", "create", "review", *changed, "--tracker", url])
        assert refused.exit_code == 1, refused.output
        assert refused.stderr.startswith(
            f"error: pipeline 'review' ({created['id']}) already exists with a different "
            "definition (transitions added: draft:abandon:done): `pipeline create` makes a "
            "pipeline once"
        )
        assert "`backlog-worker pipeline apply -f FILE`" in refused.stderr
        listed = invoke(["pipeline", "list", "--tracker", url, "--json"])
        assert [p["id"] for p in json.loads(listed.stdout)] == [created["id"]]


def test_definition_changes_name_what_differs() -> None:
    old = {"initial": "a", "states": {"a": {"agent_role": "r"}, "b": {"terminal": True}},
           "transitions": [{"from": "a", "trigger": "go", "to": "b"}]}  # fmt: skip
    reordered = {"transitions": old["transitions"], "states": {"b": {"terminal": True},
                 "a": {"agent_role": "r"}}, "initial": "a"}  # fmt: skip
    assert definition_changes(old, reordered) == []
    new = {**old, "states": {"a": {"agent_role": "q"}, "c": {"terminal": True}},
           "transitions": [{"from": "a", "trigger": "go", "to": "c"}], "retry": "none"}  # fmt: skip
    assert definition_changes(old, new) == [
        "'retry' added",
        "states added: c",
        "states removed: b",
        "states changed: a",
        "transitions added: a:go:c",
        "transitions removed: a:go:b",
    ]


def test_show_unknown_pipeline_lists_known_ones(rail: Rail) -> None:
    rail.pipeline("simple")
    result = rail.cli("pipeline", "show", "nope")
    assert result.exit_code == 1
    assert "unknown pipeline 'nope'" in result.stderr
    assert "simple" in result.stderr


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (  # a misspelt top-level key of the definition: named, not "'initial' must be ..."
            'name = "x"\n[definition]\nintial = "a"\n[definition.states.a]\nagent_role = "r"\n'
            "[definition.states.b]\nterminal = true\n"
            '[[definition.transitions]]\nfrom = "a"\ntrigger = "go"\nto = "b"\n',
            "definition: unknown key 'intial' (did you mean 'initial'?)",
        ),
        (  # a transition's key, before the rule that reads it
            'name = "x"\n[definition]\ninitial = "a"\n[definition.states.a]\nagent_role = "r"\n'
            "[definition.states.b]\nterminal = true\n"
            '[[definition.transitions]]\nfrm = "a"\ntrigger = "go"\nto = "b"\n',
            "transition #1: unknown key 'frm' (did you mean 'from'?)",
        ),
        (  # the file's own table: not "the file has no 'name'"
            'name = "x"\n[definiton]\ninitial = "a"\n',
            "unknown key 'definiton' (did you mean 'definition'?); a pipeline file holds "
            "'name', 'definition' and 'moves', or the definition alone",
        ),
        ('name = "x"\n', "has a 'name' but no 'definition' table"),
    ],
    ids=["intial", "frm", "definiton", "no-definition"],
)
def test_misspelt_pipeline_keys_are_named(
    rail: Rail, tmp_path: Path, text: str, named: str
) -> None:
    path = tmp_path / "typo.toml"
    path.write_text(text)
    result = rail.cli("pipeline", "create", "-f", str(path))
    assert result.exit_code == 2, result.output
    assert named in result.stderr
    assert rail.json("pipeline", "list") == []


def test_a_misspelt_definition_table_is_named_with_the_name_on_the_command_line(
    rail: Rail, tmp_path: Path
) -> None:
    path = tmp_path / "typo.toml"
    path.write_text('[definiton]\ninitial = "a"\n')
    result = rail.cli("pipeline", "create", "x", "-f", str(path))
    assert result.exit_code == 2, result.output
    assert "unknown key 'definiton' (did you mean 'definition'?)" in result.stderr
