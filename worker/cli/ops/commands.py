"""The operator subcommands of ``backlog-worker``: run a rail without curl and jq.

``pipeline create|list|show``, ``task add|list|show|cancel|requeue|cancel-all|transition``,
``submit ... --wait``, ``queue [--watch]``, ``plugins``, ``demo``, ``purge``, ``schedule``
and ``limit``.
Each lives in a sibling module (the ``task`` group is the :mod:`worker.cli.ops.task` package, a
module per command); this one only registers them. Exit codes: see
:data:`worker.cli.ops.common.EXIT_CODES`.
"""

from __future__ import annotations

import click

from worker.cli.ops.dashboard import dashboard_command
from worker.cli.ops.demo import demo_command
from worker.cli.ops.limit import limit_group
from worker.cli.ops.pipeline import pipeline_group
from worker.cli.ops.plugins import plugins_command
from worker.cli.ops.purge import purge_command
from worker.cli.ops.queue import queue
from worker.cli.ops.schedule import schedule_group
from worker.cli.ops.submit import submit
from worker.cli.ops.task import task_group
from worker.cli.ops.workers import workers_command

__all__ = ["register"]


def register(group: click.Group) -> None:
    """Add the operator subcommands to the ``backlog-worker`` group."""
    for command in (pipeline_group, task_group, submit, queue, plugins_command, demo_command):
        group.add_command(command)
    group.add_command(purge_command)
    group.add_command(schedule_group)
    group.add_command(limit_group)
    group.add_command(workers_command)
    group.add_command(dashboard_command)
