"""The ``backlog-worker`` command line (click). The only place that installs signal handlers.

Subcommands live in sibling modules and are registered here. Exit codes: 0 ok, 1 failure
(task failed/dead-lettered, check found problems), 2 usage or configuration error,
3 tracker unreachable, 4 backlog full, 5 wait timed out.
"""

from __future__ import annotations

import importlib

import click

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="backlog-worker")
def main() -> None:
    """A durable task rail for AI agents: workers, trackers and operator tools."""


# Each module defines ``register(group)``; a module that is missing is simply not registered yet.
for _name in ("worker.cli.run", "worker.cli.ops", "worker.cli.serve", "worker.cli.systemd"):
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as exc:  # pragma: no cover - only while a module is missing
        if exc.name != _name:
            raise
        continue
    _module.register(main)
