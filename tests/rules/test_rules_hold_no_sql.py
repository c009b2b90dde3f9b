"""The rules hold no SQL text: each statement is named, and each engine answers the name.

A string literal in ``tracker_client/rules/*.py`` that starts like SQL (``SELECT``, ``INSERT``,
``UPDATE``, ``DELETE``, ``WITH``, a savepoint, a ``PRAGMA``) is SQL written in one dialect for
both engines: it belongs in ``embedded/sql`` and ``postgres/sql`` under a name. The page
statements that replaced SQL built from filters are checked to keep their index on SQLite.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sqlite3
from collections import defaultdict
from typing import Any

import pytest

from tracker_client.embedded import EmbeddedTracker
from tracker_client.rules.statements import Statements

RULES = pathlib.Path(__file__).resolve().parents[2] / "tracker_client" / "rules"
SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|PRAGMA|SAVEPOINT|ROLLBACK|RELEASE)\b"
)
#: Every rules module.
MODULES = sorted(p.name for p in RULES.glob("*.py"))


def sql_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string literal in ``source`` that starts like SQL."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and SQL_START.match(node.value)
    ]


def test_the_check_finds_sql_literals_and_fragments_of_f_strings() -> None:
    found = sql_literals(
        'A = "SELECT 1"\nB = f"UPDATE tasks SET {x} WHERE seq = ?"\nC = "Select a task"\n'
    )
    assert [line for line, _ in found] == [1, 2]


@pytest.mark.parametrize("module", MODULES)
def test_a_rules_module_holds_no_sql(module: str) -> None:
    found = sql_literals((RULES / module).read_text(encoding="utf-8"))
    assert found == [], f"rules/{module} holds SQL text; name it in each engine's sql/"


#: What a task page adds to its scan (extension ``list_state``): each listed task's latest run
#: and its unresolved dependencies, every look-up by an index (one row each, never a scan).
LISTED = (
    " | SEARCH r USING PRIMARY KEY (id=?) LEFT-JOIN | CORRELATED SCALAR SUBQUERY 2"
    " | SEARCH runs USING INDEX sqlite_autoindex_runs_2 (task_id=?)"
    " | CORRELATED SCALAR SUBQUERY 1"
    " | SEARCH d USING COVERING INDEX sqlite_autoindex_dependencies_1 (task_id=?)"
    " | SEARCH u USING INDEX sqlite_autoindex_tasks_1 (id=?) LEFT-JOIN"
)

#: Page statement -> its SQLite plan, the very plan of the SQL it replaced (built from the
#: filters given, with or without the cursor's clause: EXPLAIN QUERY PLAN of both read alike),
#: plus, for tasks, the listed state's look-ups.
PAGE_PLAN = {
    "tasks.page": "SCAN t USING INDEX tasks_order" + LISTED,
    "tasks.page_by_stage": "SCAN t USING INDEX tasks_order" + LISTED,
    "tasks.page_by_pipeline": "SEARCH t USING INDEX tasks_pipeline (pipeline_id=?)"
    + LISTED
    + " | USE TEMP B-TREE FOR ORDER BY",
    "tasks.page_by_stage_pipeline": "SEARCH t USING INDEX tasks_pipeline (pipeline_id=?)"
    + LISTED
    + " | USE TEMP B-TREE FOR ORDER BY",
    "reads.artifacts_page": "SCAN artifacts USING INDEX artifacts_order",
    "reads.artifacts_page_by_task": "SEARCH artifacts USING INDEX artifacts_task (task_id=?)",
    "reads.artifacts_page_by_run": "SEARCH artifacts USING INDEX artifacts_run (run_id=?)",
    "reads.artifacts_page_by_task_run": "SEARCH artifacts USING INDEX artifacts_run (run_id=?)",
}


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "plan"), sorted(PAGE_PLAN.items()))
async def test_a_page_statement_keeps_its_plan_on_sqlite(
    tmp_path: pathlib.Path, name: str, plan: str
) -> None:
    path = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(path))
    await tracker.aclose()
    statement = Statements.load("tracker_client.embedded", "sqlite")[name]
    params = {
        "stage": "s",
        "pipeline_id": "p",
        "task_id": "t",
        "run_id": "r",
        "after_ms": None,
        "after_seq": None,
        "limit": 10,
    }
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
    finally:
        conn.close()
    assert " | ".join(str(r[-1]) for r in rows) == plan


@pytest.mark.anyio
async def test_every_sqlite_statement_compiles_on_a_migrated_rail(tmp_path: pathlib.Path) -> None:
    # Each statement of embedded/sql prepared (EXPLAIN: nothing runs) on a fresh rail, every
    # parameter NULL: statements only rare paths reach are checked too.
    path = tmp_path / "rail.db"
    tracker = await EmbeddedTracker.open(str(path))
    await tracker.aclose()
    failed: dict[str, str] = {}
    conn = sqlite3.connect(path)
    try:
        for name, statement in sorted(Statements.load("tracker_client.embedded", "sqlite").items()):
            params: Any = defaultdict(lambda: None)
            if not re.search(r"[:@$][A-Za-z_]", statement):
                params = [None] * statement.count("?")
            try:
                conn.execute(f"EXPLAIN {statement}", params).fetchall()
            except sqlite3.Error as exc:
                failed[name] = str(exc)
    finally:
        conn.close()
    assert failed == {}
