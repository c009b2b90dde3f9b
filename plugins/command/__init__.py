"""The ``command`` executor: run a program per task (no shell), argv/env templates, outcome files.

``command:CommandExecutor`` (the entry point) resolves lazily, so importing one submodule does not
load the executor and everything it imports.

Its modules may touch the plugin API, :mod:`plugins.proc` (the child and its process group), the
run's working directory and ``artifacts_dir``; never the tracker or the worker.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CommandExecutor"]


def __getattr__(name: str) -> Any:
    if name == "CommandExecutor":
        from plugins.command.executor import CommandExecutor

        return CommandExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
