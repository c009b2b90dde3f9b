"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Run async tests on asyncio (the worker's production loop)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _tracker_log_lines() -> Iterator[None]:
    """Each test starts with the embedded tracker's log lines as a fresh process has them: an
    in-process ``tracker serve`` (CliRunner) mutes its per-task lines process-wide, which would
    otherwise carry over into the next test."""
    from tracker_client.embedded.common import MUTED_ACTIONS

    muted = set(MUTED_ACTIONS)
    yield
    MUTED_ACTIONS.clear()
    MUTED_ACTIONS.update(muted)
