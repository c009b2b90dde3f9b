"""The generated reference pages (docs/_ref, run by docs/gen_ref.py at build time) name everything
the code declares: every command and option, configuration key, HTTP operation, metric and exit
code. Each test checks a page against the code's own list, read independently of the generator,
so a new key, command, operation or metric without its documentation fails here.

That config.example.toml shows every key with its default is tests/worker/test_config_example.py's.
"""

from __future__ import annotations

import re
from typing import Any

import click
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from docs._ref import cli, configuration, exit_codes, http_api, metrics
from worker.config.models import ConfigFile
from worker.config.sources import parse_env


def _sections(page: str, level: str = "## ") -> dict[str, str]:
    """Each section of ``page`` by its heading (without the ``#``)."""
    parts = re.split(rf"^{re.escape(level)}(.+)$", page, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


# -- CLI --------------------------------------------------------------------------------------
def _click_tree(info: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    """Every command of click's own description of the tree (``Context.to_info_dict``)."""
    found = {path: info}
    for name, sub in (info.get("commands") or {}).items():
        if not sub.get("hidden"):
            found.update(_click_tree(sub, f"{path} {name}"))
    return found


def test_the_cli_page_has_every_command_and_option() -> None:
    from worker.cli import COMMAND_MODULES, main

    tree = _click_tree(
        click.Context(main, info_name="backlog-worker", **main.context_settings).to_info_dict()[
            "command"
        ],
        "backlog-worker",
    )
    assert {p.split()[1] for p in tree if " " in p} >= set(COMMAND_MODULES)
    assert len(tree) > 30  # groups were walked, not only the top level
    sections = _sections(cli.page())
    assert set(sections) == set(tree)
    for path, info in tree.items():
        body = sections[path]
        assert f"Usage: {path}" in body
        first_line = (info["help"] or "").strip().splitlines()[0] if info["help"] else ""
        assert " ".join(first_line.split()[:3]).replace("_", "\\_") in body, path
        for param in info["params"]:
            if param["param_type_name"] == "option" and not param.get("hidden"):
                for opt in param["opts"]:
                    assert f"`{opt}`" in body, f"{path}: {opt}"
                if param["envvar"]:
                    assert f"`{param['envvar']}`" in body, f"{path}: {param['envvar']}"


def test_the_cli_page_shows_defaults_and_envvars() -> None:
    page = _sections(cli.page())
    run = page["backlog-worker run"]
    assert re.search(r"`--config` \| FILE \| +\| `BACKLOG_WORKER_CONFIG`", run)
    show = page["backlog-worker task show"]
    assert re.search(r"`--events` \| [^|]+ \| `20` \|", show)


# -- configuration ----------------------------------------------------------------------------
def _model_keys(model: type[BaseModel], table: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every leaf key of ``model``, tables and arrays of tables opened."""
    out: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        inner = getattr(ann, "__args__", (None,))[0]
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _model_keys(ann, (*table, name))
        elif isinstance(inner, type) and issubclass(inner, BaseModel):
            out += _model_keys(inner, (*table, name))
        else:
            out.append((*table, name))
    return out


KEYS = _model_keys(ConfigFile)
ARRAYS = {"roles", "schedules"}


def _table_heading(table: tuple[str, ...]) -> str:
    if not table:
        return "Top level"
    return f"[[{table[0]}]]" if table[0] in ARRAYS else f"[{'.'.join(table)}]"


def test_the_configuration_page_has_every_key_with_its_description() -> None:
    assert len(KEYS) > 40
    sections = _sections(configuration.page())
    assert sorted(k.dotted for k in configuration.config_keys()) == sorted(
        ".".join(k).replace("roles.", "roles[].").replace("schedules.", "schedules[].")
        for k in KEYS
    )
    for key in KEYS:
        body = sections[_table_heading(key[:-1])]
        assert f"| `{key[-1]}` |" in body, key
    for key in configuration.config_keys():
        assert key.description, f"{key.dotted} has no #: comment to describe it"


@pytest.mark.parametrize("key", [k for k in KEYS if k[0] not in ARRAYS], ids=".".join)
def test_each_environment_name_on_the_page_sets_its_key(key: tuple[str, ...]) -> None:
    """The name the page gives is the one the loader reads (checked through the loader's own
    parser, not the generator's rule)."""
    documented = {(*k.table, k.name): k for k in configuration.config_keys()}[key]
    assert documented.env is not None
    layers = parse_env({documented.env: "1"}, ConfigFile)
    assert not layers.problems, layers.problems
    assert [path for path, _, _ in layers.origins] == [key]


# -- HTTP API ---------------------------------------------------------------------------------
def test_the_http_api_page_has_every_operation() -> None:
    from tracker_client.contract.table import EXTENSIONS, OPERATIONS
    from tracker_client.serve.openapi import openapi_document

    page = http_api.page()
    sections = _sections(page, "### ")
    doc = openapi_document()
    assert len(OPERATIONS) > 60
    for op in OPERATIONS:
        heading = f"{op.method} {op.path.replace('_', chr(92) + '_')}"
        body = sections[heading]
        assert f"| operation | `{op.name}` |" in body
        if op.extension:
            assert f"extension `{op.extension}`" in body
        else:
            assert "NullTickets" in body
        if op.body is not None:
            assert f"`{op.body.__name__}`" in body
        if op.response is not None:
            assert f"`{op.response.__name__}`" in body
        for status in doc["paths"][op.path][op.method.lower()]["responses"]:
            assert f"`{status}`" in body, f"{heading}: {status}"
    models = _sections(page.split("## Models", 1)[1].split("## Errors", 1)[0], "### ")
    assert len(sections) == len(OPERATIONS) + len(models)
    for op in OPERATIONS:
        for model in (op.body, op.response):
            if model is not None:
                assert model.__name__ in models, f"{op.name}: {model.__name__}"
                for field in model.model_fields:
                    assert f"| `{field}` |" in models[model.__name__], f"{model.__name__}.{field}"
    assert "| `retryable` | boolean | " in models["FailBody"]
    assert models["FailBody"].count("`backlog`") == 1  # the extension that reads the field
    for name in EXTENSIONS:
        assert f"| `{name}` |" in page


# -- metrics ----------------------------------------------------------------------------------
def test_the_metrics_page_has_every_metric_a_worker_exposes() -> None:
    from worker.config.telemetry import MetricsConfig
    from worker.telemetry.metrics import WorkerMetrics

    live = WorkerMetrics(MetricsConfig(listen="127.0.0.1:0"))
    try:
        exposed = generate_latest(live.registry).decode()
    finally:
        live.socket.close()
    page = metrics.page()
    names = {f.name for f in text_string_to_metric_families(exposed)}
    assert {"backlog_worker_claims", "backlog_worker_run_duration_seconds"} <= names
    for family in text_string_to_metric_families(exposed):
        shown = family.name + ("_total" if family.type == "counter" else "")
        assert f"`{shown}` | {family.type} |" in page, shown
    # the families read at scrape time only (slots, queue) are on the page too
    for name in ("backlog_worker_slots_busy", "backlog_worker_queue_waiting"):
        assert f"`{name}` | gauge |" in page


def test_the_metrics_page_has_every_metric_the_served_tracker_exposes() -> None:
    from tracker_client.serve.metrics import ServedMetrics
    from tracker_client.sweeps import SweepCounts

    live = ServedMetrics(
        None,  # type: ignore[arg-type]  # read at scrape time only
        open_connections=lambda: 1,
        refused_connections=lambda: 0,
        sweeps=SweepCounts(),
    )
    exposed = generate_latest(live.registry).decode()
    page = metrics.page()
    families = list(text_string_to_metric_families(exposed))
    assert len(families) >= 8
    for family in families:
        shown = family.name + ("_total" if family.type == "counter" else "")
        assert f"`{shown}` | {family.type} |" in page, shown
    assert "`backlog_tracker_requests_total` | counter | `operation`, `status_class` |" in page


# -- exit codes -------------------------------------------------------------------------------
def test_the_exit_codes_page_has_every_code() -> None:
    from worker.cli.errors import EXIT_CODES

    page = exit_codes.page()
    assert len(EXIT_CODES) >= 6
    for number, meaning in EXIT_CODES.items():
        assert f"| `{number}` |" in page
        assert meaning.split(":")[0] in page
    assert re.search(r"\| `4` \| `EXIT_BACKLOG_FULL` \|.*`BacklogFull`", page)
