"""Fixtures of the pipeline-evolution tests: the contract suite's ``tracker`` and
``open_tracker``, so each rail test runs on every rail (embedded file, PostgreSQL schema, served
over ASGI and over real HTTP on 127.0.0.1), and pipeline files in ``tmp_path``."""

from __future__ import annotations

from tests.contract.conftest import (  # noqa: F401  (fixtures and the marker, re-used)
    clock,
    open_tracker,
    pytest_configure,
    tracker,
    tracker_impl,
)
