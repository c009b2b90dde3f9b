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

__all__ = ["current", "numbered_files"]


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
