"""The ``python`` executor: call an async or plain function of the worker's own environment.

``python:PythonExecutor`` (the entry point) resolves lazily, so importing one submodule does not
load the executor and everything it imports.

Its modules may touch the plugin API and the function's module (imported into the worker's process)
and start no process; never the tracker or the worker.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PythonExecutor"]


def __getattr__(name: str) -> Any:
    if name == "PythonExecutor":
        from plugins.python.executor import PythonExecutor

        return PythonExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
