"""The compatibility window: which schema changes a rail takes at open, which wait for
``rail migrate``, and what a rail records so that the previous release still opens it.

Workers of the previous release and of this one run on one rail while a fleet is upgraded one
host at a time (docs/operate/upgrades.md). A release refuses a rail whose recorded schema
*level* is above its own, so:

* a migration whose file holds the line ``-- additive`` only adds (a table, an index, a column
  with a default, a function older code never calls): it is applied at open and recorded among
  the rail's *additions*, without raising the level, so the older release keeps opening it;
* any other migration raises the level. One the previous release already has (numbered at or
  below the engine's ``PREVIOUS_RELEASE_LEVEL``) is applied at open as before; a newer one would
  lock the previous release out, so it is left to ``backlog-worker rail migrate``, which first
  checks the rail's worker registry for workers still alive on another version.

Each engine keeps its level and additions its own way (SQLite: ``user_version`` and the
``schema_additions`` table; PostgreSQL: ``backlog_schema`` and ``backlog_schema_additions``) and
calls :func:`plan` with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Migration", "Plan", "additive", "level_of", "plan"]

_ADDITIVE = "-- additive"


def additive(sql: str) -> bool:
    """Whether a migration's text declares it additive (a line ``-- additive``)."""
    return any(line.strip() == _ADDITIVE for line in sql.splitlines())


@dataclass(frozen=True)
class Migration:
    """One numbered migration of an engine."""

    number: int
    name: str
    sql: str

    @property
    def additive(self) -> bool:
        """Whether it only adds (see the module docstring)."""
        return additive(self.sql)


def level_of(migrations: Sequence[Migration], applied: Iterable[int]) -> int:
    """The level a rail with ``applied`` migrations has: its highest non-additive one."""
    done = set(applied)
    return max((m.number for m in migrations if m.number in done and not m.additive), default=0)


@dataclass(frozen=True)
class Plan:
    """What opening a rail does: the migrations to apply now, those only ``rail migrate`` may
    apply, and the level and additions to record afterwards."""

    now: tuple[Migration, ...]
    explicit: tuple[Migration, ...]
    level: int
    additions: frozenset[int]

    def records_change(self, level: int, additions: Iterable[int]) -> bool:
        """Whether the recorded level or additions differ from this plan's (a rail written by a
        build before the window keeps its additive migrations in its level)."""
        return self.level != level or self.additions != frozenset(additions)


def plan(
    migrations: Sequence[Migration],
    level: int,
    additions: Iterable[int],
    previous_release_level: int,
    *,
    explicit_step: bool = False,
) -> Plan:
    """The plan for a rail recorded at ``level`` with ``additions``; ``explicit_step``: this is
    ``rail migrate``, which may raise the level past ``previous_release_level``."""
    added = set(additions)
    applied = {m.number for m in migrations if m.number <= level} | added
    now: list[Migration] = []
    explicit: list[Migration] = []
    for m in migrations:
        if m.number in applied:
            continue
        if explicit:  # after a migration left to `rail migrate`, every later one waits too
            explicit.append(m)
        elif m.additive or m.number <= previous_release_level or explicit_step:
            now.append(m)
        else:
            explicit.append(m)
    done = applied | {m.number for m in now}
    new_level = level_of(migrations, done)
    kept = frozenset(n for n in done if n > new_level)
    return Plan(tuple(now), tuple(explicit), new_level, kept)
