"""The ``command`` executor: run a program per task (no shell), argv/env templates, outcome files.

``command:CommandExecutor`` (the entry point) resolves lazily, so importing one submodule does not
load the executor and everything it imports.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CommandExecutor"]


def __getattr__(name: str) -> Any:
    if name == "CommandExecutor":
        from plugins.command.executor import CommandExecutor

        return CommandExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
