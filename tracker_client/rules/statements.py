"""Named SQL statements: each engine's SQL in its own dialect, kept as data in ``.sql`` files.

The rules (:mod:`tracker_client.rules`) never hold SQL text: they run a statement by name
(``ctx.exec("release.end_run", (now, error, run_id))``), and each engine answers the name with
its own text, read from the ``sql/`` directory beside the engine (``tracker_client/embedded/sql``
for SQLite, ``tracker_client/postgres/sql`` for PostgreSQL). Nothing rewrites one dialect into
the other: a change to a SQLite statement can't change PostgreSQL's.

A file holds statements of one area, its stem the names' prefix; each statement starts with a
``-- name:`` line and runs to the next one (the ``;`` that ends it is dropped)::

    -- name: release.end_run
    -- shared
    UPDATE runs SET status = 'released', ended_at_ms = ?, error = ? WHERE id = ?;

Other ``-- key`` or ``-- key: value`` lines right under the name are the statement's *hints*,
read by the engine that runs it (PostgreSQL's: ``shared``, ``deferred``, ``returning``,
``in-write``, ``prepared``; SQLite's: ``many``, a statement a batch runs for all its rows in one
``executemany``, and ``values``, one whose ``VALUES`` row a batch repeats, once per row, in one
statement, see :meth:`~tracker_client.rules.common.Ctx.many`), or by the tests (``only``:
a statement one engine alone has); other ``--`` lines are comments. Parameters use the engine's
own placeholders (SQLite ``?``/``:name``, PostgreSQL ``%s``/``%(name)s``); a statement that binds
one value twice uses names, so both engines take the same arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib import resources

__all__ = ["Statement", "StatementError", "Statements"]

_NAME = re.compile(r"^--\s*name:\s*(\S+)\s*$")
_HINT = re.compile(r"^--\s*([a-z][a-z0-9-]*)\s*(?::\s*(.*?))?\s*$")
_VALID_NAME = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")


class StatementError(Exception):
    """A statement file is malformed (names the file, the line and what is wrong)."""


class Statement(str):
    """One statement's text (a ``str``, so a driver runs it as it is) with its name and hints."""

    __slots__ = ("hints", "name")

    name: str
    hints: Mapping[str, str]

    def __new__(cls, text: str, name: str, hints: Mapping[str, str] | None = None) -> Statement:
        """A statement ``name`` with ``text`` and the engine's ``hints`` (empty by default)."""
        self = super().__new__(cls, text)
        self.name = name
        self.hints = dict(hints or {})
        return self

    def hint(self, key: str) -> str | None:
        """The value of hint ``key`` (``""`` for a bare flag), or None when absent."""
        return self.hints.get(key)


class Statements(Mapping[str, Statement]):
    """One engine's statements by name (see the module docstring for the file format)."""

    def __init__(self, statements: Mapping[str, Statement], engine: str) -> None:
        self._by_name = dict(statements)
        #: The engine's name, for error messages ("sqlite", "postgres").
        self.engine = engine

    def __getitem__(self, name: str) -> Statement:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no statement {name!r} in the {self.engine} engine's sql/") from None

    def __contains__(self, name: object) -> bool:
        # A rule asks whether its engine has a statement (one only SQLite has) on hot paths:
        # Mapping's own __contains__ goes through __getitem__ and a caught KeyError.
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    @classmethod
    def load(cls, package: str, engine: str, directory: str = "sql") -> Statements:
        """Every statement in the ``*.sql`` files of ``package``'s ``directory``."""
        found: dict[str, Statement] = {}
        folder = resources.files(package).joinpath(directory)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".sql"):
                continue
            origin = f"{package.replace('.', '/')}/{directory}/{entry.name}"
            for statement in parse(entry.read_text(encoding="utf-8"), origin):
                if statement.name in found:
                    raise StatementError(f"{origin}: statement {statement.name!r} defined twice")
                found[statement.name] = statement
        return cls(found, engine)


def parse(text: str, origin: str) -> list[Statement]:
    """The statements of one file's ``text``; ``origin`` (its path) names it in errors."""
    stem = origin.rsplit("/", 1)[-1].removesuffix(".sql")
    out: list[Statement] = []
    name: str | None = None
    hints: dict[str, str] = {}
    body: list[str] = []
    in_hints = False
    start = 0

    def close() -> None:
        if name is None:
            return
        sql = "\n".join(body).strip().rstrip(";").strip()
        if not sql:
            raise StatementError(f"{origin}:{start}: statement {name!r} has no SQL")
        out.append(Statement(sql, name, hints))

    for lineno, line in enumerate(text.splitlines(), start=1):
        match = _NAME.match(line.strip())
        if match is not None:
            close()
            name, hints, body, in_hints, start = match.group(1), {}, [], True, lineno
            if not _VALID_NAME.match(name):
                raise StatementError(
                    f"{origin}:{lineno}: statement name {name!r} must read '<area>.<name>' "
                    "in lower case"
                )
            if name.split(".", 1)[0] != stem:
                raise StatementError(
                    f"{origin}:{lineno}: statement {name!r} must start with {stem + '.'!r} "
                    "(the file's name)"
                )
            continue
        stripped = line.strip()
        if stripped.startswith("--"):
            hint = _HINT.match(stripped) if in_hints else None
            if hint is not None:
                hints[hint.group(1)] = hint.group(2) or ""
            continue
        if name is None:
            if stripped:
                raise StatementError(f"{origin}:{lineno}: SQL before the first '-- name:' line")
            continue
        in_hints = False
        body.append(line)
    close()
    return out
