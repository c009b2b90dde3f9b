"""``python -m worker`` is ``backlog-worker``."""

from worker.cli import main

if __name__ == "__main__":
    main()
