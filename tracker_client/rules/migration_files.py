"""Each engine's numbered migration files, listed without reading them, and the test that an
open has nothing to migrate (:mod:`tracker_client.embedded.migrate`,
:mod:`tracker_client.postgres.migrate`).

A worker opens a current rail: it reads no migration file and never imports the window's
planner (:mod:`tracker_client.rules.upgrades`, ~10-13 M instructions of its start-up with the
files' reading, ``python -m bench.startup``). The files are read, and the plan made, only when
:func:`current` says a rail is behind, new, or recorded by a build before the window.
"""

from __future__ import annotations

from collections.abc import Set
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a rail is planned: an open of a current one plans nothing
    from tracker_client.rules.upgrades import Migration

__all__ = ["Shipped", "current", "numbered_files"]


def numbered_files(package: str) -> list[tuple[int, Traversable]]:
    """The ``NNNN_name.sql`` files in ``package``'s ``schema/`` (not read): (number, file), in
    order; ``RuntimeError`` unless they are numbered 1..n."""
    found: list[tuple[int, Traversable]] = []
    for entry in resources.files(package).joinpath("schema").iterdir():
        prefix, _, _rest = entry.name.partition("_")
        if entry.name.endswith(".sql") and prefix.isdigit():
            found.append((int(prefix), entry))
    found.sort(key=lambda f: f[0])
    for expected, (number, entry) in enumerate(found, start=1):
        if number != expected:
            raise RuntimeError(f"{package} schema migrations are not numbered 1..n: {entry.name}")
    return found


def current(level: int, additions: Set[int], schema_version: int) -> bool:
    """Whether a rail recorded at ``level`` with ``additions`` has every migration up to
    ``schema_version`` (this build's) and was recorded by a build that knows the window (it has
    additions). Its level is then this build's (the highest non-additive migration, the same in
    every build that ships it) and :func:`~tracker_client.rules.upgrades.plan` would apply and
    record nothing."""
    return (
        bool(additions)
        and level <= schema_version
        and all(n in additions for n in range(level + 1, schema_version + 1))
    )


class Shipped:
    """One engine's migrations as this build ships them, read from its files on first use.

    Its migrate module (``namespace``: that module's ``globals()``) answers ``LEVEL`` and
    ``_MIGRATIONS`` through :meth:`attribute`, its :pep:`562` ``__getattr__``, and keeps each
    value once read; ``SCHEMA_VERSION`` and ``_MIGRATIONS`` are read from the module, so a value a
    test sets there is the one used."""

    __slots__ = ("_namespace", "_package")

    def __init__(self, package: str, namespace: dict[str, Any]) -> None:
        self._package = package
        self._namespace = namespace

    def migrations(self) -> list[tuple[int, str, str]]:
        """The numbered migrations in ``schema/``: (version, file name, SQL), in order."""
        return [
            (n, entry.name, entry.read_text(encoding="utf-8"))
            for n, entry in numbered_files(self._package)
        ]

    def attribute(self, name: str) -> Any:
        """``LEVEL`` (the level a rail of the full schema has: its highest non-additive
        migration) or ``_MIGRATIONS`` (this build's migrations), made and kept in the module."""
        if name == "_MIGRATIONS":
            from tracker_client.rules.upgrades import Migration

            value: Any = [Migration(n, fname, sql) for n, fname, sql in self.migrations()]
        elif name == "LEVEL":
            from tracker_client.rules.upgrades import level_of

            value = level_of(self.shipped(), range(1, self._namespace["SCHEMA_VERSION"] + 1))
        else:
            module = self._namespace["__name__"]
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        self._namespace[name] = value  # read once
        return value

    def shipped(self) -> list[Migration]:
        """The module's ``_MIGRATIONS`` (as a test may have set it), read on first use."""
        found: list[Migration] | None = self._namespace.get("_MIGRATIONS")
        return self.attribute("_MIGRATIONS") if found is None else found
