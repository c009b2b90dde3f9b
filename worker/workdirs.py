"""Run working directories: named from the tracker's run id, never outside the base.

The run id comes from the tracker, so it is input like any other: an id such as
``x/../../victim`` must not name a directory outside the base, which the worker later removes.
A safe id (one plain path component) keeps its readable name ``run-<id>``; any other id is
named by its SHA-256 instead (stable and collision-free), with a warning. Removal resolves the
path and refuses anything that is not a direct child of the resolved base.

The base itself, when ``[worker] workdir`` is not set, is per user (:func:`default_workdir_base`):
a directory shared by every user on the host (the old ``/tmp/backlog-worker``) let another user's
directory there fail every run, or read and tamper with ours. :func:`prepare_workdir_base` makes
the default base mode 0700 and refuses one that is not ours; :func:`check_workdir_base` is what
``backlog-worker check`` reports.

A configured base (``[worker] workdir``) is the operator's choice and is used as it is, with one
exception (:func:`open_workdir_problem`): a world-writable directory without the sticky bit is
refused, since any local user could rename or replace our run directories in it; a world-writable
one with the sticky bit (``/tmp``-like) is accepted with a warning, since another user may still
create a run's directory before us (see docs/operate/long-running.md).

:func:`sweep_stale_workdirs` removes, at worker start, the run directories a killed worker left.

It may touch the workdir base and the run directories directly under it (create, check, lock,
remove) and
the environment variables that place the default base; never a path outside it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import anyio

from plugins.rundir_lock import lock_if_unused
from tracker_client.errors import ConfigError

__all__ = [
    "SAFE_COMPONENT",
    "check_workdir_base",
    "default_workdir_base",
    "open_workdir_problem",
    "prepare_workdir_base",
    "remove_workdir",
    "sweep_stale_workdirs",
    "workdir_name",
]

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


def sweep_stale_workdirs(base: Path) -> tuple[int, int]:
    """Remove the run directories under ``base`` that no live run holds (left by a worker killed
    with ``kill -9``); ``(removed, kept)``. A run holds its directory with a lock while it lives
    (:mod:`plugins.rundir_lock`), so the directories of runs another live worker sharing the base
    is running now are kept. Called once at worker start, in a thread."""
    removed = kept = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0, 0  # no base yet: nothing was left in it
    for entry in entries:
        if not entry.name.startswith("run-") or not entry.is_dir(follow_symlinks=False):
            continue
        fd = lock_if_unused(entry.path)
        if fd is None:
            kept += 1
            continue
        try:
            if _remove(entry.path, base):
                removed += 1
        finally:
            os.close(fd)
    if removed:
        log.info(
            "removed %d run director%s left by a killed worker under %s (%d held by live runs)",
            removed,
            "y" if removed == 1 else "ies",
            base,
            kept,
            extra={"action": "workdirs_swept"},
        )
    return removed, kept


# -- the base directory --------------------------------------------------------------------------
#: A line of ``backlog-worker check``: how it went.
CheckLevel = Literal["ok", "warn", "fail"]

#: The last resort: shared by every user, so our directory in it is per uid, 0700 and verified.
_TMP = "/tmp"  # noqa: S108


def _first_abs(value: str | None) -> str | None:
    # systemd joins several StateDirectory=/RuntimeDirectory= paths with ':'; the first is ours.
    first = (value or "").split(":", 1)[0]
    return first if os.path.isabs(first) else None


def default_workdir_base(environ: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The base of run directories when ``[worker] workdir`` is not set, and what chose it.

    First that is set (an absolute path): ``$STATE_DIRECTORY/runs`` (systemd ``StateDirectory=``:
    on disk, outlives the unit's private ``/tmp``, which is wiped at stop), ``$RUNTIME_DIRECTORY/
    runs`` (``RuntimeDirectory=``: tmpfs, removed at stop), ``$XDG_RUNTIME_DIR/backlog-worker``
    (the login session's own tmpfs); else ``$TMPDIR`` (or ``/tmp``) ``/backlog-worker-<uid>``.
    """
    env = os.environ if environ is None else environ
    for var, leaf in (
        ("STATE_DIRECTORY", "runs"),
        ("RUNTIME_DIRECTORY", "runs"),
        ("XDG_RUNTIME_DIR", "backlog-worker"),
    ):
        found = _first_abs(env.get(var))
        if found:
            return Path(found) / leaf, f"${var}"
    tmp = _first_abs(env.get("TMPDIR"))
    return Path(tmp or _TMP) / f"backlog-worker-{os.geteuid()}", "$TMPDIR" if tmp else _TMP


_FIX = "set [worker] workdir to a directory of your own (or point TMPDIR elsewhere)"


def _unsafe(path: Path) -> str | None:
    """Why ``path`` is no safe base for our run directories (not ours, open to others), or None."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory (a symlink or a file): remove it, or {_FIX}"
    if st.st_uid != os.geteuid():
        return (
            f"{path} belongs to uid {st.st_uid}, not to this worker (uid {os.geteuid()}): another "
            f"user made it, so runs there could fail or be tampered with; remove it (as its "
            f"owner or root), or {_FIX}"
        )
    if st.st_mode & 0o022:
        return (
            f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"run chmod 700 {path}, or {_FIX}"
        )
    return None


def open_workdir_problem(path: Path) -> tuple[CheckLevel, str] | None:
    """Whether a configured base ``path`` is open to every local user: ``("fail", why)`` when it is
    world-writable without the sticky bit (anyone may rename, remove or swap our run directories
    in it), ``("warn", why)`` when world-writable with the sticky bit (``/tmp``-like: anyone may
    still create ``run-<id>`` before we do), None otherwise or when it does not exist yet (it is
    then created by the first run, as ours). Each text names the path and the fix."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not st.st_mode & stat.S_IWOTH:
        return None
    mode = f"{stat.S_IMODE(st.st_mode):04o}"
    fix = "point [worker] workdir at a directory only the worker's user can write (mode 0700)"
    if not st.st_mode & stat.S_ISVTX:
        return (
            "fail",
            f"{path} is writable by every user and has no sticky bit (mode {mode}): any local "
            f"user could replace or remove the run directories in it; run chmod o-w {path}, "
            f"or {fix}",
        )
    return (
        "warn",
        f"{path} is writable by every user (mode {mode}, sticky): another user may create a "
        f"run's directory there before the worker does; {fix}",
    )


def prepare_workdir_base(configured: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The base of run directories, ready for runs: ``configured`` as it is (the operator's
    choice), else :func:`default_workdir_base` created mode 0700 and verified to be ours.

    A default base owned by another user, not a directory, or group/world-writable is refused
    with a :class:`ConfigError` naming the path and the fix (the worker does not start); so is a
    configured base that is world-writable without the sticky bit (:func:`open_workdir_problem`;
    one with the sticky bit is logged as a warning).
    """
    if configured is not None:
        found = open_workdir_problem(configured)
        if found is not None and found[0] == "fail":
            raise ConfigError(f"run directory ([worker] workdir): {found[1]}")
        if found is not None:
            log.warning(
                "run directory ([worker] workdir): %s",
                found[1],
                extra={"action": "workdir_world_writable"},
            )
        return configured
    path, source = default_workdir_base(environ)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(
            f"run directory {path} (the default from {source}) cannot be created: "
            f"{exc.strerror or exc}; {_FIX}"
        ) from exc
    problem = _unsafe(path)
    if problem is not None:
        raise ConfigError(f"run directory (the default from {source}): {problem}")
    return path


def _probe(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.rmdir(tempfile.mkdtemp(prefix=".check-", dir=path))


def check_workdir_base(configured: Path | None) -> list[tuple[CheckLevel, str]]:
    """What ``backlog-worker check`` says about the run directory base: (level, text) lines,
    level ``ok``, ``warn`` or ``fail``. It creates the base if missing (as a run would) and
    proves it writable by creating and removing a directory in it."""
    where = "[worker] workdir" if configured is not None else default_workdir_base()[1]
    try:
        path = prepare_workdir_base(configured)
        _probe(path)
    except ConfigError as exc:
        return [("fail", str(exc))]
    except OSError as exc:
        target = configured if configured is not None else default_workdir_base()[0]
        return [("fail", f"run directory {target} ({where}) is not writable: {exc.strerror}")]
    lines: list[tuple[CheckLevel, str]] = [("ok", f"run directory {path} ({where}) is writable")]
    if configured is not None:
        found = open_workdir_problem(path)
        problem = _unsafe(path)
        if found is not None:  # a "fail" was raised by prepare_workdir_base above
            lines.append((found[0], f"run directory ([worker] workdir): {found[1]}"))
        elif problem is not None:
            lines.append(("warn", f"run directory ([worker] workdir): {problem}"))
    return lines
