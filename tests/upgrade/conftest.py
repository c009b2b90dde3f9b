"""The previous release, built once per test session (tests/upgrade/previous.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.upgrade.previous import Release, build, remove


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The previous release, installed in its own venv."""
    release = build(tmp_path_factory.mktemp("previous-release"))
    try:
        yield release
    finally:
        remove(release)
