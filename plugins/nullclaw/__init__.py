"""The ``nullclaw`` executor: run the NullClaw agent CLI per task, with its own home and prompt.

``nullclaw:NullClawExecutor`` (the entry point) resolves lazily, so importing one submodule does not
load the executor and everything it imports.

Its modules may touch the plugin API, :mod:`plugins.proc` (the ``nullclaw`` child), the run's HOME
and workspace, ``answers_dir`` and the provider key variable; never the tracker or the worker.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NullClawExecutor"]


def __getattr__(name: str) -> Any:
    if name == "NullClawExecutor":
        from plugins.nullclaw.executor import NullClawExecutor

        return NullClawExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
