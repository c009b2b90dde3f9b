"""Fixtures of the PostgreSQL tests: the shared server of this process (see :mod:`.server`)."""

from __future__ import annotations

import pytest

from tests.postgres.server import PgServer, shared_server


@pytest.fixture(scope="session")
def pg_server() -> PgServer:
    """The one real PostgreSQL of the session (skips without binaries; fails so in CI)."""
    return shared_server()
