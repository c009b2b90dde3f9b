"""Fixtures of the PostgreSQL tests: the shared server of this process (see :mod:`.server`)."""

from __future__ import annotations

import logging

import pytest

from tests.postgres.server import PgServer, shared_server


@pytest.fixture(scope="session")
def pg_server() -> PgServer:
    """The one real PostgreSQL of the session (skips without binaries; fails so in CI)."""
    return shared_server()


@pytest.fixture
def quiet_tracker_log(caplog: pytest.LogCaptureFixture) -> None:
    """The tracker logger at WARNING: the one-trip paths step aside when it logs at INFO (it
    then wants the queue depth for its lines), so a test of those paths holds whatever an
    earlier test of the same process left the logging at."""
    caplog.set_level(logging.WARNING, logger="backlog_worker.tracker")
