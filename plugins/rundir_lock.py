"""Which run directories a live run still uses: each holds a lock on its own directory.

A run's working directory is removed by its worker when the run ends; a worker killed with
``kill -9`` (OOM killer, crash) leaves it behind, and several workers of one user may share the
base. So a run holds a shared ``flock`` on its directory from the moment it creates it until the
worker removes it (:func:`hold_rundir`); the kernel drops the lock when the process dies,
however it dies. A worker starting up removes every run directory it can lock exclusively
(:func:`lock_if_unused`): nobody alive holds it, so its run is over; one that another live worker
holds is left alone (see docs/operate/long-running.md).

The lock's descriptor is close-on-exec, so no executor inherits it (a child cannot keep a dead
worker's directory alive). It may touch the run directory given (open, ``flock``); nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

__all__ = ["hold_rundir", "lock_if_unused"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def hold_rundir(path: str) -> int | None:
    """Hold ``path`` (a run directory just created) for a live run: the descriptor to close when
    the run's directory is gone, or None when it cannot be locked (it then runs unheld: a sweep
    at another worker's start could remove it, which only a same-named stale directory being
    swept at this very moment would cause)."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def lock_if_unused(path: str) -> int | None:
    """An exclusive lock on run directory ``path`` when no live run holds it (its descriptor:
    close it once the directory is removed), None when one does or it is not a directory."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        with contextlib.suppress(OSError):
            os.close(fd)
        return None
    return fd
