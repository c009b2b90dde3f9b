"""Taking the api token out of the worker's own environment once the configuration is read.

A child of the worker can read ``/proc/<worker pid>/environ`` (same user), and that file shows the
environment the process *started* with: deleting a variable from :data:`os.environ` does not
change it. :func:`release_secret_env` therefore does both: it removes the token variables from
``os.environ`` (so no child inherits them, whatever builds its environment) and overwrites their
entries in the process's initial environment block in place (through ``/proc/self/mem``), so
``/proc/<pid>/environ`` no longer holds the token. The values are kept in this module for later
loads (HUP reload) through :func:`settings_environ`.

Limits: before the call (process start until the first config load) the token is readable there
by any process of the same user; the token stays in the worker's memory (a same-user process
allowed to ptrace it can read that); a token file (``[tracker] api_token_file``, systemd
``LoadCredential=``) never puts it in the environment at all, and is the recommended way.

It may touch :data:`os.environ`, ``/proc/self/stat`` and ``/proc/self/mem`` (the token's variables
only), and imports nothing of the project.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["SECRET_VARIABLES", "is_secret_variable", "release_secret_env", "settings_environ"]

log = logging.getLogger("backlog_worker.config")

#: Settings variables that carry a secret (names are case-insensitive, like every setting); see
#: :func:`is_secret_variable` for the rule.
SECRET_VARIABLES = frozenset({"BACKLOG_WORKER_API_TOKEN", "BACKLOG_WORKER_TRACKER__API_TOKEN"})


def is_secret_variable(name: str) -> bool:
    """Whether ``name`` may carry the api token: a ``BACKLOG_WORKER_*`` name with ``TOKEN`` in it
    (not a ``*_FILE`` path), or the whole ``[tracker]`` table as JSON."""
    upper = name.upper()
    if not upper.startswith("BACKLOG_WORKER_"):
        return False
    if upper == "BACKLOG_WORKER_TRACKER" or upper in SECRET_VARIABLES:
        return True
    return "TOKEN" in upper and not upper.endswith("_FILE")


#: Secret variables taken out of ``os.environ`` by :func:`release_secret_env`, for later loads.
_released: dict[str, str] = {}


def settings_environ() -> dict[str, str]:
    """The environment settings are read from: :data:`os.environ` plus the released secrets."""
    return {**_released, **os.environ}


def release_secret_env() -> list[str]:
    """Remove the token variables from this process's environment, live and initial.

    Returns the names released. Later :func:`settings_environ` calls still see the values, so a
    reload reads the same configuration. Wiping the initial block is best effort: where
    ``/proc/self/mem`` cannot be written, a DEBUG line says so and only ``os.environ`` is cleaned.
    """
    names = [name for name in os.environ if is_secret_variable(name)]
    for name in names:
        _released[name] = os.environ.pop(name)  # also unsetenv(): libc's environ forgets it
    try:
        _wipe_initial_environ()
    except (OSError, ValueError, IndexError) as exc:
        log.debug("initial environment not wiped: %s", exc, extra={"action": "env_wipe_skipped"})
    return names


def _wipe_initial_environ() -> int:
    """Overwrite every secret ``NAME=value`` in the initial environment block with NULs.

    The block is ``[env_start, env_end)`` of ``/proc/self/stat`` (fields 50 and 51). The caller
    has unset the variables first, so nothing in the process points at those bytes any more.
    Returns how many entries were wiped.
    """
    stat = Path("/proc/self/stat").read_bytes()
    fields = stat[stat.rindex(b")") + 2 :].split()  # fields[0] is field 3 (the state)
    start, end = int(fields[47]), int(fields[48])
    if not 0 < start < end:
        raise ValueError(f"no environment block in /proc/self/stat ({start}..{end})")
    wiped = 0
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(start)
        block = mem.read(end - start)
        offset = 0
        for entry in block.split(b"\0"):
            key, sep, _ = entry.partition(b"=")
            if sep and is_secret_variable(key.decode("utf-8", "replace")):
                mem.seek(start + offset)
                mem.write(b"\0" * len(entry))
                wiped += 1
            offset += len(entry) + 1
    return wiped
