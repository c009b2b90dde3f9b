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

:meth:`Statements.load` lists the files and reads each on the first lookup of a name of its
area: a worker runs statements of about a third of them, and parsing all ~1,200 lines of one
engine's files cost ~8-9 M instructions of its start-up (``python -m bench.startup``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from importlib import resources
from importlib.resources.abc import Traversable

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

    def __init__(
        self,
        statements: Mapping[str, Statement],
        engine: str,
        unread: Mapping[str, tuple[Traversable, str]] | None = None,
    ) -> None:
        self._by_name = dict(statements)
        #: The engine's name, for error messages ("sqlite", "postgres").
        self.engine = engine
        #: Files not read yet: area (a name's prefix, the file's stem) -> (file, its origin).
        self._unread = dict(unread or {})
        self._reading = threading.Lock()

    def __getitem__(self, name: str) -> Statement:
        try:
            return self._by_name[name]
        except KeyError:
            pass
        if self._read(name.partition(".")[0]):
            return self[name]
        raise KeyError(f"no statement {name!r} in the {self.engine} engine's sql/") from None

    def __contains__(self, name: object) -> bool:
        # A rule asks whether its engine has a statement (one only SQLite has) on hot paths:
        # Mapping's own __contains__ goes through __getitem__ and a caught KeyError.
        if name in self._by_name:
            return True
        return (
            isinstance(name, str) and self._read(name.partition(".")[0]) and name in self._by_name
        )

    def __iter__(self) -> Iterator[str]:
        self._read_all()
        return iter(self._by_name)

    def __len__(self) -> int:
        self._read_all()
        return len(self._by_name)

    def _read(self, area: str) -> bool:
        """Read the file of ``area`` (a name's prefix) if it is not read yet; whether it was
        unread (in any thread: a lookup racing the read waits for it)."""
        if area not in self._unread:
            return False
        with self._reading:
            found = self._unread.pop(area, None)
            if found is None:
                return True  # another thread read it meanwhile
            entry, origin = found
            statements: dict[str, Statement] = {}
            for statement in parse(entry.read_text(encoding="utf-8"), origin):
                if statement.name in statements:
                    raise StatementError(f"{origin}: statement {statement.name!r} defined twice")
                statements[statement.name] = statement
            # A file names only its own area's statements (parse refuses others).
            self._by_name.update(statements)
        return True

    def _read_all(self) -> None:
        for area in list(self._unread):
            self._read(area)

    @classmethod
    def load(cls, package: str, engine: str, directory: str = "sql") -> Statements:
        """Every statement in the ``*.sql`` files of ``package``'s ``directory`` (each file read
        on the first lookup of one of its names)."""
        unread: dict[str, tuple[Traversable, str]] = {}
        folder = resources.files(package).joinpath(directory)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".sql"):
                origin = f"{package.replace('.', '/')}/{directory}/{entry.name}"
                unread[entry.name.removesuffix(".sql")] = (entry, origin)
        return cls({}, engine, unread)


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
        stripped = line.strip()
        # Only a comment line can name a statement or hint it: the SQL lines between (most of
        # a file) take no regular expression.
        match = _NAME.match(stripped) if stripped.startswith("--") else None
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
