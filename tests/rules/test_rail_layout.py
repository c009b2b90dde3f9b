"""The rails are composed, not inherited: one ``Rail`` class over an engine.

Pins the shape of docs/architecture/index.md's rails: every operation of the contract table is a
method of :class:`~tracker_client.rules.rail.Rail`; each rail is that class over its engine, a
few classes deep; the PostgreSQL rail imports nothing of the SQLite one, and no underscore name
of the rules (what both engines need is public there).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tracker_client
from tracker_client.contract import table as contract
from tracker_client.embedded import EmbeddedTracker
from tracker_client.rules.rail import Rail

PACKAGE = Path(tracker_client.__file__).parent


def _imports(folder: str) -> list[tuple[str, str, str]]:
    """(file, module, name) of every ``from ... import name`` in ``tracker_client/<folder>``."""
    found = []
    for path in sorted((PACKAGE / folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found += [(path.name, node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(path.name, alias.name, "") for alias in node.names]
    return found


#: Rows of the table the server answers itself (its OpenAPI document), not a tracker method.
SERVED_ONLY = {"openapi", "openapi_well_known"}


def test_every_operation_of_the_table_is_a_method_of_the_rail() -> None:
    names = {op.name for op in contract.OPERATIONS} - SERVED_ONLY
    assert sorted(n for n in names if not callable(getattr(Rail, n, None))) == []


def test_the_postgresql_rail_imports_nothing_of_the_sqlite_rail() -> None:
    crossing = [i for i in _imports("postgres") if i[1].startswith("tracker_client.embedded")]
    assert crossing == []


@pytest.mark.parametrize("folder", ["postgres", "embedded"])
def test_no_rail_imports_a_private_name_of_the_rules_or_another_rail(folder: str) -> None:
    shared = ("tracker_client.rules", "tracker_client.embedded", "tracker_client.postgres")
    private = [
        i
        for i in _imports(folder)
        if i[1].startswith(shared)
        and not i[1].startswith(f"tracker_client.{folder}")
        and i[2].startswith("_")
    ]
    assert private == []


def test_each_rail_is_the_rail_class_over_its_engine_a_few_classes_deep() -> None:
    pytest.importorskip("psycopg")
    from tracker_client.postgres.tracker import PostgresTracker

    for rail in (EmbeddedTracker, PostgresTracker):
        assert rail.__mro__[1] is Rail
        assert len(rail.__mro__) <= 4, [c.__name__ for c in rail.__mro__]
    assert not issubclass(PostgresTracker, EmbeddedTracker)
