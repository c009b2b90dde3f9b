"""Fixtures shared by every test package."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.upgrade.previous import Release, build, remove

# A job a non-interactive shell starts in the background (``.ci/run &``, some CI runners) has
# SIGINT ignored, and every process it starts inherits that: the tests that send SIGINT as a
# terminal's Ctrl-C would then see it ignored. A terminal's foreground job has SIGINT at its
# default, so the suite gives its children that (a handler, unlike SIG_IGN, is reset by exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# A command's artifacts are kept where they outlive the run: by default under the user's data
# directory (plugins.artifact_files.default_artifacts_dir). The suite's go to a directory of its
# own, inherited by the workers it starts, never the developer's home.
_DATA_HOME = tempfile.mkdtemp(prefix="backlog-worker-suite-data-")
atexit.register(shutil.rmtree, _DATA_HOME, True)
os.environ["XDG_DATA_HOME"] = _DATA_HOME
os.environ.pop("STATE_DIRECTORY", None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The suite's ``--dist loadgroup`` (pyproject's addopts): each test file goes to one
    worker whole, and the tests marked ``xdist_group(NAME)`` to one worker together.

    By file: a module's fixtures of module scope (a browser, a bare clone of the checkout) are
    made once, and a module's tests keep their order. By group: a session fixture shared by
    several files (the previous release, :func:`previous`) is built once, in one worker.
    xdist's own loadgroup sends every unmarked test on its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileOrGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):  # a group (as xdist's loadgroup tells)
                return "@" + nodeid.rsplit("@", 1)[-1]
            return nodeid.split("::", 1)[0]

    return FileOrGroup(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of the previous release share one worker (see :func:`pytest_xdist_make_scheduler`):
    its build is the slowest session fixture."""
    for item in items:
        if "previous" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("previous-release"))


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio (the worker's production loop)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _tracker_log_lines() -> Iterator[None]:
    """Each test starts with the embedded tracker's log lines as a fresh process has them: an
    in-process ``tracker serve`` (CliRunner) mutes its per-task lines process-wide, which would
    otherwise carry over into the next test."""
    from tracker_client.rules.common import MUTED_ACTIONS

    muted = set(MUTED_ACTIONS)
    yield
    MUTED_ACTIONS.clear()
    MUTED_ACTIONS.update(muted)


@pytest.fixture
def rail_logs_warnings_only() -> Iterator[None]:
    """The rail's logger at WARNING for one test: its fast paths (a plain ``finish_many``
    batch, PostgreSQL's one-trip calls) are taken only when no per-task INFO line is wanted, so
    a test of those paths must not depend on a level an earlier test left on a parent logger
    (the worker's own logging set-up, run in-process by CLI tests, sets one)."""
    rail = logging.getLogger("backlog_worker.tracker")
    level = rail.level
    rail.setLevel(logging.WARNING)
    yield
    rail.setLevel(level)


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The previous release, installed in its own venv (tests/upgrade/previous.py): built once
    per session for every test that runs it (tests/upgrade, tests/pipelines), defined here so
    that one fixture serves them all (a fixture imported into another directory's module is a
    fixture of its own there, and built the release a second time)."""
    release = build(tmp_path_factory.mktemp("previous-release"))
    try:
        yield release
    finally:
        remove(release)
