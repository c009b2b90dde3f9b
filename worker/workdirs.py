"""Run working directories: named from the tracker's run id, never outside the base.

The run id comes from the tracker, so it is input like any other: an id such as
``x/../../victim`` must not name a directory outside the base, which the worker later removes.
A safe id (one plain path component) keeps its readable name ``run-<id>``; any other id is
named by its SHA-256 instead (stable and collision-free), with a warning. Removal resolves the
path and refuses anything that is not a direct child of the resolved base.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from pathlib import Path

import anyio

__all__ = ["SAFE_COMPONENT", "remove_workdir", "workdir_name"]

log = logging.getLogger("backlog_worker.worker")

#: One harmless path component: no separator, not ``.``/``..``, not hidden, bounded length.
SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def workdir_name(run_id: str) -> str:
    """The directory name of a run: ``run-<id>``, or ``run-h<sha256>`` for an unsafe id."""
    if SAFE_COMPONENT.fullmatch(run_id):
        return f"run-{run_id}"
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    log.warning(
        "run id %r from the tracker is not a safe path component; its working directory is "
        "named run-h%s instead",
        run_id[:200],
        digest,
        extra={"action": "unsafe_run_id"},
    )
    return f"run-h{digest}"


def _contained(path: Path, base: Path) -> bool:
    try:
        real, real_base = path.resolve(), base.resolve()
    except (OSError, RuntimeError):
        return False
    return real.parent == real_base and not path.is_symlink()


def _remove(path: str, base: Path) -> bool:
    target = Path(path)
    if not _contained(target, base):
        log.error(
            "not removing %s: it is not a run directory directly under %s",
            path,
            base,
            extra={"action": "workdir_outside_base"},
        )
        return False
    shutil.rmtree(os.fspath(target), ignore_errors=True)
    return True


async def remove_workdir(path: str, base: Path) -> bool:
    """Remove a run's directory (in a thread) if it lies directly under ``base``; whether it did.

    Anything else (a path escaping the base, a symlink) is left alone and logged as an error.
    """
    return await anyio.to_thread.run_sync(_remove, path, base)
