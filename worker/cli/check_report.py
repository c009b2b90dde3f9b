"""What ``backlog-worker check`` found: one line per check, or one JSON object (``--json``).

Each check has a stable ``name`` (``configuration``, ``tracker``, ``api_token``,
``lease_ttl:<role>``, ``role:<role>``, ``executors``), an ``ok`` verdict, a ``level``
(``ok``, ``warn`` or ``fail``; a warning does not fail the check) and a human ``detail``.
Text lines print as each check finishes; JSON is written once, at the end.

It may touch stdout only (through :func:`click.echo`); running the checks is
:mod:`worker.cli.check`'s.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

import click

__all__ = ["CheckReport", "CheckResult"]

Level = Literal["ok", "warn", "fail"]
_PREFIX = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


@dataclass(frozen=True)
class CheckResult:
    """One check: its name, verdict and what it found."""

    name: str
    ok: bool
    level: Level
    detail: str


@dataclass
class CheckReport:
    """The checks of one ``check`` invocation, printed as text lines or collected for JSON."""

    as_json: bool = False
    checks: list[CheckResult] = field(default_factory=list)

    def add(self, name: str, level: Level, detail: str, *, line: str | None = None) -> None:
        """Record a check; in text mode print it (``line``: the text, default ``detail``)."""
        self.checks.append(CheckResult(name, level != "fail", level, detail))
        if not self.as_json:
            click.echo(f"{_PREFIX[level]} {line or detail}")

    @property
    def failed(self) -> bool:
        """Whether any check failed."""
        return any(not c.ok for c in self.checks)

    def finish(self) -> None:
        """In JSON mode, write ``{"ok": ..., "checks": [...]}`` on stdout."""
        if self.as_json:
            doc = {"ok": not self.failed, "checks": [asdict(c) for c in self.checks]}
            click.echo(json.dumps(doc, indent=2))
