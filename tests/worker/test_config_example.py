"""config.example.toml against the models: every key it shows (set or commented out) is a real
key with a valid value, every model key and section is documented in it, and it has no section
the models lack. The models (:mod:`worker.config.models`) are the one definition; the example
follows.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from plugins.registry import load_executor
from tracker_client.factory import open_tracker
from tracker_client.validation import describe_validation
from worker.config.models import (
    ConfigFile,
    RoleConfig,
    ScheduleConfig,
    TrackerConfig,
    WorkerConfig,
)
from worker.config.telemetry import MetricsConfig, TracingConfig

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).parents[2] / "config.example.toml"
#: The tables of a configuration file and the model of each.
TABLES: dict[str, type[BaseModel]] = {
    "": ConfigFile,
    "[tracker]": TrackerConfig,
    "[worker]": WorkerConfig,
    "[[roles]]": RoleConfig,
    "[[schedules]]": ScheduleConfig,
    "[metrics]": MetricsConfig,
    "[tracing]": TracingConfig,
}


def uncommented(text: str) -> str:
    """The example with every commented-out key and table header put back (``# key = value``,
    ``# [tracker.options]``); prose comments stay comments."""
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("#"):
            candidate = stripped[1:].strip()
            try:
                parsed = tomllib.loads(candidate)
            except tomllib.TOMLDecodeError:
                parsed = {}
            if parsed or candidate.startswith("["):
                line = candidate
        out.append(line)
    return "\n".join(out) + "\n"


def full_example() -> dict[str, Any]:
    return tomllib.loads(uncommented(EXAMPLE.read_text()))


def test_commented_keys_are_found() -> None:
    """The uncommenting finds the optional keys (a guard for the tests below)."""
    data = full_example()
    assert data["tracker"]["api_token_file"] == "api-token"
    assert "synchronous" in data["tracker"]["options"]
    assert data["worker"]["workdir"] == "/var/lib/backlog-worker/runs"
    assert data["roles"][0]["triggers"] == {"review.draft": "submit", "quick": "approve"}


def test_every_example_key_is_real_and_valid() -> None:
    data = full_example()
    try:
        ConfigFile.model_validate(data)
    except ValidationError as exc:
        pytest.fail(f"config.example.toml: {describe_validation(exc, root=ConfigFile)}")


def test_every_section_is_documented_and_real() -> None:
    data = full_example()
    sections = {name for name, info in ConfigFile.model_fields.items() if info.annotation}
    tables = {key for key, value in data.items() if isinstance(value, dict | list)}
    expected = {"tracker", "worker", "roles", "schedules", "metrics", "tracing"}
    assert tables == expected == sections - {"log_level", "log_format"}
    text = EXAMPLE.read_text()
    for header in ("[tracker]", "[worker]", "[[roles]]"):
        assert f"\n{header}\n" in text, f"{header} is not a section of config.example.toml"


def test_example_config_documents_every_key() -> None:
    """config.example.toml promises every key with its default: a new key must be added there."""
    data = full_example()
    shown: dict[str, set[str]] = {
        "": set(data),
        "[tracker]": set(data["tracker"]),
        "[worker]": set(data["worker"]),
        "[[roles]]": set(data["roles"][0]),
        "[[schedules]]": set(data["schedules"][0]),
        "[metrics]": set(data["metrics"]),
        "[tracing]": set(data["tracing"]),
    }
    for table, model in TABLES.items():
        for key in model.model_fields:
            assert key in shown[table], f"{table} {key} is not in config.example.toml"


def test_example_defaults_are_the_models_defaults() -> None:
    """A key the example sets (not commented out) shows the model's default."""
    data = tomllib.loads(EXAMPLE.read_text())
    for table, model, values in (
        ("[tracker]", TrackerConfig, data["tracker"]),
        ("[worker]", WorkerConfig, data["worker"]),
        ("", ConfigFile, {k: v for k, v in data.items() if not isinstance(v, dict | list)}),
    ):
        for key, value in values.items():
            if key in model.model_fields and not isinstance(value, dict):
                default = model.model_fields[key].get_default(call_default_factory=True)
                assert value == default, f"{table} {key} = {value!r}, the default is {default!r}"


async def test_example_free_form_tables_are_valid_options(tmp_path: Path) -> None:
    """``[tracker.options]`` opens an embedded rail; ``[roles.options]`` builds its executor."""
    data = full_example()
    tracker = await open_tracker(f"sqlite:///{tmp_path}/rail.db", **data["tracker"]["options"])
    await tracker.aclose()
    role = data["roles"][0]
    assert load_executor(role["executor"], role["options"]) is not None
