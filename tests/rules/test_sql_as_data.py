"""The converted areas hold no SQL text: their statements are data, read by name from each
engine's ``sql/`` (docs/architecture/index.md). A string literal or f-string in one of these
modules that reads as SQL fails here, naming the module and the line.

The list grows as areas are converted; once every area of ``tracker_client/rules`` is, it becomes
the whole package.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: Modules whose SQL is all named statements.
CONVERTED = [
    *(
        f"tracker_client/rules/{area}.py"
        for area in (
            "agents",
            "backlog",
            "createopts",
            "follow",
            "pipelines",
            "ratelimits",
            "retention",
            "schedules",
            "spans",
            "stats",
            "store",
            "workers",
        )
    ),
    "tracker_client/postgres/search.py",
    "tracker_client/postgres/spans.py",
    "tracker_client/postgres/follow.py",
]
_SQL = re.compile(
    r"\b(SELECT\s|INSERT\s+(OR\s+\w+\s+)?INTO\b|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\b|PRAGMA\s|"
    r"SAVEPOINT\s|ROLLBACK\s+TO\b|RELEASE\s+\w)",
)


def _sql_literals(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            text = node.value.decode() if isinstance(node.value, bytes) else node.value
            if id(node) not in docstrings and _SQL.search(text):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {text[:60]!r}")
    return found


@pytest.mark.parametrize("module", CONVERTED)
def test_a_converted_module_holds_no_sql(module: str) -> None:
    assert _sql_literals(ROOT / module) == []


def test_the_check_sees_sql_in_a_string_and_an_f_string(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        '"""Docs may say SELECT * FROM tasks."""\n'
        'A = "SELECT id FROM tasks WHERE seq = ?"\n'
        'B = f"DELETE FROM tasks WHERE id IN ({A})"\n'
        'C = "tasks.next_expiry"\n'
    )
    found = _sql_literals(source, tmp_path)
    assert [line.split(":")[1] for line in found] == ["2", "3"]
