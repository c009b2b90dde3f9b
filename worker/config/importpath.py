"""``[worker] python_path``: the directories a worker imports job modules from.

A python job's ``callable = "jobs:summarise"`` is imported by the worker's interpreter, so its
directory must be on ``sys.path``; a unit or a shell used to set ``PYTHONPATH`` for it. The
configuration names the directories instead (resolved against the config file's directory by
:mod:`worker.config.models`), and they are put on the path before any executor is built.

It may touch ``sys.path`` and the file system (is each entry a directory) only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tracker_client.errors import ConfigError
from worker.config.models import Config

__all__ = ["use_python_path"]


def use_python_path(config: Config) -> None:
    """Put ``[worker] python_path`` first on ``sys.path`` (each entry once, in its order).

    ``ConfigError`` names an entry that is no directory: a typo would otherwise surface later
    as the python executor's "cannot import module".
    """
    entries = [str(p) for p in config.worker.python_path]
    for entry in entries:
        if not Path(entry).is_dir():
            where = f" (in {config.source})" if config.source else ""
            raise ConfigError(f"worker.python_path{where}: {entry} is not a directory")
    sys.path[:0] = [e for e in entries if e not in sys.path]
