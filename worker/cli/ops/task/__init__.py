"""``backlog-worker task``: the group of commands that work on tasks, one module per command.

``add`` (:mod:`.add`, its flags :mod:`.fields`, shared with ``submit``), ``list`` (:mod:`.list`),
``show`` (:mod:`.show`, ``--follow`` streamed by :mod:`.follow`), ``cancel`` and ``cancel-all``
(:mod:`.cancel`), ``requeue`` (:mod:`.requeue`) and ``transition`` (:mod:`.transition`). This
module only builds the group; :mod:`worker.cli.ops.commands` adds it to ``backlog-worker``.
"""

from __future__ import annotations

import click

from worker.cli.ops.task.add import task_add
from worker.cli.ops.task.cancel import task_cancel, task_cancel_all
from worker.cli.ops.task.list import task_list
from worker.cli.ops.task.requeue import task_requeue
from worker.cli.ops.task.show import task_show
from worker.cli.ops.task.transition import task_transition

__all__ = ["task_group"]


@click.group("task")
def task_group() -> None:
    """Enqueue, list, inspect, cancel and requeue tasks."""


for _command in (
    task_add,
    task_list,
    task_show,
    task_cancel,
    task_cancel_all,
    task_requeue,
    task_transition,
):
    task_group.add_command(_command)
