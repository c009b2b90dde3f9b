"""Each engine's SQL is data: named statements, the same names on both engines, all used.

The rules (``tracker_client/rules``) run statements by name; the SQLite engine answers from
``tracker_client/embedded/sql`` and PostgreSQL from ``tracker_client/postgres/sql``. These tests
keep the two sets in step and the file format's errors clear.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from tracker_client.rules.statements import Statement, StatementError, Statements, parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
SQLITE = Statements.load("tracker_client.embedded", "sqlite")
POSTGRES = Statements.load("tracker_client.postgres", "postgres")
#: Ctx methods that take a statement's name as their first argument.
BY_NAME = {"exec", "all", "one", "scalar", "many"}


def _only(statements: Statements, engine: str) -> set[str]:
    return {n for n, s in statements.items() if s.hint("only") == engine}


def _names_used() -> set[str]:
    """Every string literal that names a statement (``area.name``) in the package's code, and
    every statement another one names as its variant inside a write (hint ``in-write``)."""
    names = {s.hint("in-write") or "" for s in POSTGRES.values()} - {""}
    known = set(SQLITE) | set(POSTGRES)
    for path in (ROOT / "tracker_client").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in known
            ):
                names.add(node.value)
    return names


def _names_called() -> dict[str, str]:
    """Statement names passed literally to ``ctx.exec/all/one/scalar/many`` -> where."""
    found: dict[str, str] = {}
    for path in (ROOT / "tracker_client").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in BY_NAME
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and " " not in node.args[0].value
                and "." in node.args[0].value
            ):
                found[node.args[0].value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_both_engines_answer_the_same_names() -> None:
    shared_sqlite = set(SQLITE) - _only(SQLITE, "sqlite")
    shared_pg = set(POSTGRES) - _only(POSTGRES, "postgres")
    assert sorted(shared_sqlite - shared_pg) == [], "SQLite statements PostgreSQL lacks"
    assert sorted(shared_pg - shared_sqlite) == [], "PostgreSQL statements SQLite lacks"


def test_every_name_the_code_runs_exists() -> None:
    missing = {
        name: where
        for name, where in _names_called().items()
        if name not in SQLITE and name not in POSTGRES
    }
    assert missing == {}


def test_every_statement_is_used() -> None:
    unused = (set(SQLITE) | set(POSTGRES)) - _names_used()
    assert sorted(unused) == []


def test_statements_carry_their_name_and_hints() -> None:
    statement = POSTGRES["release.end_run"]
    assert isinstance(statement, str)
    assert statement.name == "release.end_run"
    assert statement.hint("deferred") == ""
    assert statement.hint("returning") is None
    assert statement.startswith("UPDATE runs")
    assert not statement.endswith(";")


def test_an_unknown_name_names_the_engine() -> None:
    with pytest.raises(KeyError, match=r"no statement .release\.nope. in the sqlite engine"):
        SQLITE["release.nope"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT 1;", r"x/area\.sql:1: SQL before the first '-- name:' line"),
        ("-- name: area.A\nSELECT 1;", r"x/area\.sql:1: statement name 'area.A' must read"),
        ("-- name: other.a\nSELECT 1;", r"x/area\.sql:1: statement 'other.a' must start with"),
        ("-- name: area.a\n-- shared\n", r"x/area\.sql:1: statement 'area.a' has no SQL"),
    ],
)
def test_a_malformed_file_names_the_file_the_line_and_the_fault(text: str, message: str) -> None:
    with pytest.raises(StatementError, match=message):
        parse(text, "x/area.sql")


def test_a_name_defined_twice_is_refused(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "twice_pkg"
    (package / "sql").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sql" / "area.sql").write_text(
        "-- name: area.a\nSELECT 1;\n-- name: area.a\nSELECT 2;\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(StatementError, match=r"statement .area\.a. defined twice"):
            Statements.load("twice_pkg", "test")["area.a"]
    finally:
        sys.path.remove(str(tmp_path))


def test_a_file_is_read_on_the_first_lookup_of_its_area(tmp_path: pathlib.Path) -> None:
    """A worker runs statements of a third of the files: load lists them, a lookup reads one."""
    package = tmp_path / "lazy_pkg"
    (package / "sql").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sql" / "good.sql").write_text("-- name: good.a\nSELECT 1;\n")
    (package / "sql" / "bad.sql").write_text("SELECT 2;\n")  # malformed: read only if asked
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        statements = Statements.load("lazy_pkg", "test")
        assert statements["good.a"] == "SELECT 1"
        assert "good.b" not in statements
        assert "other.a" not in statements
        with pytest.raises(KeyError, match=r"no statement 'good\.b'"):
            statements["good.b"]
        with pytest.raises(StatementError, match="SQL before the first"):
            "bad.a" in statements  # noqa: B015 - the lookup reads the file
        with pytest.raises(StatementError, match="SQL before the first"):
            len(Statements.load("lazy_pkg", "test"))
    finally:
        sys.path.remove(str(tmp_path))


def test_comments_and_hints_are_told_apart() -> None:
    (first,) = parse(
        "-- a file comment\n-- name: area.a\n-- returning: seq\n-- shared\nINSERT INTO t\n"
        "-- a comment inside\nVALUES (1);\n",
        "x/area.sql",
    )
    assert isinstance(first, Statement)
    assert dict(first.hints) == {"returning": "seq", "shared": ""}
    assert first == "INSERT INTO t\nVALUES (1)"


def test_a_values_statement_is_an_insert_of_one_positional_row() -> None:
    """A SQLite statement marked ``values`` is an ``INSERT ... VALUES (...)`` ending with its
    one row of positional parameters: what ``Ctx.many`` repeats once per item."""
    marked = [s for s in SQLITE.values() if s.hint("values") is not None]
    assert marked
    for sql in marked:
        text = str(sql)
        assert text.startswith("INSERT INTO "), sql.name
        row = text.rpartition("VALUES")[2].strip()
        assert row.startswith("(") and row.endswith(")"), sql.name
        assert ":" not in row and "?" in row, sql.name
