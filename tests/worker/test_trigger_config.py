"""A role's ``[roles.triggers]`` and ``default_trigger``: read, flattened, and bad keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker_client.errors import ConfigError
from worker.config.models import load_config

ROLE = '[[roles]]\nname = "writer"\nexecutor = "command"\n'


def load(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "worker.toml"
    path.write_text(ROLE + text)
    return load_config(path).roles[0].triggers


def test_quoted_and_dotted_keys_both_name_a_stage(tmp_path: Path) -> None:
    triggers = load(
        tmp_path,
        '[roles.triggers]\n"review.draft" = "submit"\nnotes.draft = "publish"\nquick = "approve"\n',
    )
    assert triggers == {"review.draft": "submit", "notes.draft": "publish", "quick": "approve"}


def test_unset_default_trigger_leaves_the_choice_to_the_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(ROLE)
    role = load_config(path).roles[0]
    assert role.default_trigger is None and role.triggers == {}


def test_example_config_documents_the_keys() -> None:
    example = Path(__file__).parents[2] / "config.example.toml"
    text = example.read_text()
    assert "[roles.triggers]" in text and "default_trigger" in text
    load_config(example)  # and is still valid


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ('"review." = "x"', "key 'review.'"),
        ('".draft" = "x"', "key '.draft'"),
        ('"a..b" = "x"', "key 'a..b'"),
        ('"" = "x"', "key ''"),
        ('" review" = "x"', "key ' review'"),
    ],
)
def test_a_bad_key_is_refused_by_name(tmp_path: Path, entry: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"[roles.triggers]\n{entry}\n")
    message = str(info.value)
    assert "worker.toml: [[roles]] #1 (writer) triggers" in message
    assert named in message
    assert '"<pipeline>.<stage>"' in message


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ('review = ""', "key 'review': the trigger must be a non-empty name"),
        ('review = " approve"', "key 'review': the trigger must be a non-empty name"),
        ("review = 3", "triggers.review: Input should be a valid string"),
        ("review.draft = 3", "triggers.review.draft: Input should be a valid string"),
        ("review.draft.x = 'y'", "triggers.review.draft: Input should be a valid string"),
    ],
)
def test_a_bad_trigger_is_refused_with_its_key(tmp_path: Path, entry: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"[roles.triggers]\n{entry}\n")
    assert named in str(info.value)


def test_triggers_must_be_a_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\(writer\) triggers: Input should be a valid dict"):
        load(tmp_path, 'triggers = "approve"\n')


def test_empty_default_trigger_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\(writer\) default_trigger: String should have"):
        load(tmp_path, 'default_trigger = ""\n')
