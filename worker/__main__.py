"""``python -m worker`` is ``backlog-worker``.

It touches nothing itself: it imports :mod:`worker.cli` and calls its ``main``.
"""

from worker.cli import main

if __name__ == "__main__":
    main()
