"""The one ValidationError formatter (tracker_client.validation): paths named, pydantic's text
without its prefix, unknown keys with the closest known one, option sentences, no values."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tracker_client.validation import (
    describe_options,
    describe_validation,
    model_at,
    must,
    problems,
)


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(1.0, gt=0)


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "x"
    inner: Inner = Field(default_factory=Inner)
    items: tuple[Inner, ...] = ()
    table: dict[str, int] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _named(cls, value: str) -> str:
        if value == "bad":
            raise ValueError("must not be 'bad'")
        return value


def refusal(model: type[BaseModel], data: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return info.value


def test_paths_and_messages() -> None:
    exc = refusal(Outer, {"inner": {"timeout_s": 0}, "items": [{}, {"timeout_s": -1}]})
    assert describe_validation(exc) == (
        "inner.timeout_s: Input should be greater than 0; "
        "items.1.timeout_s: Input should be greater than 0"
    )
    assert describe_validation(exc, first_only=True) == (
        "inner.timeout_s: Input should be greater than 0"
    )


def test_value_error_prefix_is_dropped_and_the_root_is_named() -> None:
    assert describe_validation(refusal(Outer, {"name": "bad"})) == "name: must not be 'bad'"
    assert describe_validation(refusal(Outer, []), empty="(body)").startswith("(body): ")


def test_unknown_keys_suggest_the_closest_known_one() -> None:
    exc = refusal(Outer, {"nmae": "a", "inner": {"timeout": 1}, "items": [{"timeot_s": 1}]})
    text = describe_validation(exc, root=Outer)
    assert "nmae: unknown key (did you mean 'name'?)" in text
    assert "inner.timeout: unknown key (did you mean 'timeout_s'?)" in text
    assert "items.0.timeot_s: unknown key (did you mean 'timeout_s'?)" in text
    assert describe_validation(refusal(Outer, {"zzz": 1})) == "zzz: unknown key"
    assert model_at(Outer, ("items", 0)) is Inner
    assert model_at(Outer, ("table",)) is None


def test_a_custom_place_prefixes_each_problem() -> None:
    exc = refusal(Outer, {"name": "bad", "inner": {"timeout_s": 0}})
    text = describe_validation(exc, place=lambda p: f"file.toml: {p.place()}: {p.message}")
    assert text.count("file.toml: ") == 2


def test_values_never_reach_the_message() -> None:
    exc = refusal(Outer, {"table": {"a": "s3cret-token"}, "unknown": "s3cret-token"})
    assert "s3cret" not in describe_validation(exc)
    assert "s3cret" not in describe_options(exc, Outer)
    assert all("s3cret" not in p.message for p in problems(exc))


class Opts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: Annotated[tuple[str, ...], Field(min_length=1), must("must be a non-empty list")] = Field(
        (), validate_default=True
    )
    limit: int = Field(1, ge=0)


def test_option_sentences() -> None:
    assert describe_options(refusal(Opts, {}), Opts, label="demo option") == (
        "demo option 'argv' must be a non-empty list"
    )
    assert describe_options(refusal(Opts, {"argv": ["a"], "limit": -1}), Opts) == (
        "option 'limit': Input should be greater than or equal to 0"
    )
    text = describe_options(
        refusal(Opts, {"argv": [1], "a": 1, "b": 2}), Opts, unknown_label="demo option(s)"
    )
    assert text == (
        "unknown demo option(s) 'a', 'b' (known: argv, limit); option 'argv' must be a "
        "non-empty list"
    )
