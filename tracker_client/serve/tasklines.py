"""Which of the embedded tracker's log lines a serving process writes.

The embedded tracker logs a line per claim, per finish (or retry) and per creation at INFO. In
a worker's own process that is one line per run; a served rail moves hundreds of tasks a second
for a whole fleet, and a line per claim and per finish is then noise in the journal (the
metrics count them: ``--metrics-listen``) that costs the server about a tenth of its CPU per
request (each line is formatted, and counts its role's queue first). So ``tracker serve``
mutes them unless asked (``--log-tasks``, or ``--log-level DEBUG``); what an operator must see
stays at INFO: expired leases, dead letters, cancels, requeues, releases, moves by hand, plus
the server's own lines (start and address, connection trouble) and every warning and error.

It may touch the embedded tracker's set of muted actions
(:data:`tracker_client.rules.common.MUTED_ACTIONS`) and nothing else.
"""

from __future__ import annotations

from tracker_client.rules.common import MUTED_ACTIONS

__all__ = ["PER_TASK_ACTIONS", "log_task_lines"]

#: The tracker's lines said once per task: claimed, finished or retried, created, deduped.
PER_TASK_ACTIONS = frozenset({"task_claimed", "task_finished", "task_created", "task_deduped"})


def log_task_lines(on: bool) -> None:
    """Write the per-task lines (``on``) or skip them before any work is done for them."""
    if on:
        MUTED_ACTIONS.difference_update(PER_TASK_ACTIONS)
    else:
        MUTED_ACTIONS.update(PER_TASK_ACTIONS)
