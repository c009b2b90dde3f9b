"""``python -m worker.cli``: the ``backlog-worker`` command without its console script."""

from worker.cli import main

main(prog_name="backlog-worker")
