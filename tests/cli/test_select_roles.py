"""``run --role NAME`` (and ``check --role``) keeps only the roles named and every other key of
the configuration: its schedules, metrics and tracing tables apply to the worker as they would
without ``--role``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker_client.errors import ConfigError
from worker.cli.prepare import load_selected

CONFIG = """
log_level = "WARNING"
[tracker]
url = "sqlite:///rail.db"
[metrics]
listen = "127.0.0.1:9464"
[tracing]
enabled = true
[[roles]]
name = "coder"
executor = "python"
options = { callable = "jobs:code" }
[[roles]]
name = "checker"
executor = "python"
options = { callable = "jobs:check" }
[[schedules]]
name = "nightly"
pipeline = "p"
cron = "0 3 * * *"
title = "nightly"
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(CONFIG)
    return path


def test_a_selected_role_keeps_every_other_key(tmp_path: Path) -> None:
    path = _config(tmp_path)
    whole = load_selected(path, {}, ())
    selected = load_selected(path, {}, ("checker",))
    assert [r.name for r in selected.roles] == ["checker"]
    assert selected.model_dump(exclude={"roles"}) == whole.model_dump(exclude={"roles"})
    assert selected.metrics.listen == "127.0.0.1:9464"
    assert selected.tracing.enabled is True
    assert [s.name for s in selected.schedules] == ["nightly"]
    assert selected.source == path


def test_an_unknown_role_is_refused_naming_the_configured_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--role 'painter' is not configured .*checker, coder"):
        load_selected(_config(tmp_path), {}, ("painter",))
