"""A worker whose rail runs in its process mutes, at their source, the rail's lines that repeat a
run's own: the rail then neither builds them nor steps off its batch fast paths for them (at
the default INFO a no-op task cost ~3x the CPU before: docs/benchmarks.md). The lines a user
reads are unchanged (tests/cli/test_words_logs.py runs a real worker)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracker_client.rules.common import MUTED_ACTIONS
from worker.cli.run import _setup_logging
from worker.config.models import load_config
from worker.logs import TrackerRunLines


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The root handlers and the ``backlog_worker`` level as before the test (the set-up under
    test replaces them process-wide)."""
    root, ours = logging.getLogger(), logging.getLogger("backlog_worker")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    ours.setLevel(our_level)


def _config(tmp_path: Path, url: str, level: str) -> Path:
    path = tmp_path / "worker.toml"
    path.write_text(
        f'log_level = "{level}"\n[tracker]\nurl = "{url}"\n'
        '[[roles]]\nname = "r"\nexecutor = "python"\n'
        '[roles.options]\ncallable = "bench.worker:noop"\n'
    )
    return path


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize("url", ["sqlite:///{tmp}/rail.db", "postgresql://u@127.0.0.1:1/db"])
def test_an_in_process_rail_mutes_the_repeated_lines_unless_debug(tmp_path: Path, url: str) -> None:
    config = load_config(_config(tmp_path, url.format(tmp=tmp_path), "INFO"))
    _setup_logging(config)
    assert TrackerRunLines.REPEATS <= MUTED_ACTIONS
    _setup_logging(load_config(_config(tmp_path, url.format(tmp=tmp_path), "DEBUG")))
    assert not TrackerRunLines.REPEATS & MUTED_ACTIONS


@pytest.mark.usefixtures("restored_logging")
def test_a_remote_rail_is_left_as_it_is(tmp_path: Path) -> None:
    _setup_logging(load_config(_config(tmp_path, "http://127.0.0.1:1", "INFO")))
    assert not TrackerRunLines.REPEATS & MUTED_ACTIONS
