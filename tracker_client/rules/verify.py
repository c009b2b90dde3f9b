"""The rail's own invariants, checked on a copy or a live rail (``backlog-worker rail verify``).

A backup can be a consistent file and still not be a rail whose work is whole: these are the
promises of docs/guarantees/backlog.md that hold between any two transactions, written as
queries that answer the rows breaking them. Each engine runs them with its own statements
(``verify.*`` in its ``sql/``); an engine's own integrity check (SQLite's ``integrity_check``
and ``foreign_key_check``) comes first, in the engine's module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COUNTS", "INVARIANTS", "VerifyReport", "check_invariants", "count_rows"]

#: Invariant statement -> what a row it answers means (the row's first column names the
#: task or run, the second, when there is one, says more).
INVARIANTS: dict[str, str] = {
    "verify.lease_without_running_run": ("holds a lease whose run is missing or not running"),
    "verify.running_run_without_lease": (
        "has a run marked running that is not the run its task's lease names (an orphan run)"
    ),
    "verify.run_without_task": "is a run of a task that does not exist",
    "verify.event_without_task": "is an event of a task that does not exist",
    "verify.attempt_ahead": (
        "has a run numbered past the task's last attempt (attempt numbers must only grow)"
    ),
    "verify.version_not_positive": "has a task version below 1 (versions start at 1 and grow)",
    "verify.finished_with_lease": "is finished (terminal or dead-lettered) but holds a lease",
    "verify.task_without_pipeline": "is a task of a pipeline that does not exist",
    "verify.dependency_dangling": "is a dependency edge naming a task that does not exist",
}
#: Counting statements -> the figure's name in the report.
COUNTS: dict[str, str] = {
    "verify.count_tasks": "tasks",
    "verify.count_leased": "leased tasks",
    "verify.count_runs": "runs",
    "verify.count_events": "events",
}
#: At most this many offending rows are named per invariant (the count says how many).
SHOWN = 5


@dataclass
class VerifyReport:
    """What ``rail verify`` found: the rail it read, figures, and every broken promise."""

    rail: str
    schema_version: int
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the rail passed every check."""
        return not self.problems


def check_invariants(rows_of: Callable[[str], Sequence[Sequence[Any]]]) -> list[str]:
    """One line per broken invariant; ``rows_of(name)`` runs the engine's statement ``name``."""
    problems: list[str] = []
    for name, meaning in INVARIANTS.items():
        rows = list(rows_of(name))
        if not rows:
            continue
        shown = ", ".join(
            str(row[0]) + (f" ({row[1]})" if len(row) > 1 and row[1] is not None else "")
            for row in rows[:SHOWN]
        )
        more = f" and {len(rows) - SHOWN} more" if len(rows) > SHOWN else ""
        problems.append(f"{len(rows)} row(s) {meaning}: {shown}{more}")
    return problems


def count_rows(rows_of: Callable[[str], Sequence[Sequence[Any]]]) -> dict[str, int]:
    """The rail's figures (tasks, leased tasks, runs, events) by their report names."""
    return {label: int(rows_of(name)[0][0]) for name, label in COUNTS.items()}
