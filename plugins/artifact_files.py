"""Hash and size a file for an artifact, optionally copying it somewhere that outlives the run.

Used by :meth:`plugins.api.ExecutionContext.artifact_file` (and through it by the ``command``
executor's ``outcome.json`` artifacts). Blocking: call it in a worker thread.
:func:`default_artifacts_dir` is where the ``command`` executor copies them when its role names
no ``artifacts_dir``: a run's directory is removed when the run ends (unless ``keep_workdirs``),
and often lives on a tmpfs, so an artifact left there names a file that is gone.

It may touch the file it hashes (read) and the copy's destination (directories created, the copy
written through a temporary file), and reads the environment variables that place the default
directory; nothing of the tracker or the worker.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FileDigest", "default_artifacts_dir", "digest_file", "path_component"]

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileDigest:
    """What an artifact records of a file: its absolute path, sha256 (hex) and size."""

    path: Path
    sha256: str
    size_bytes: int


def default_artifacts_dir(environ: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """Where artifacts are kept when nothing says otherwise, and what chose it.

    First that is set (an absolute path): ``$STATE_DIRECTORY/artifacts`` (a systemd unit's
    ``StateDirectory=``, on disk: ``/var/lib/backlog-worker/artifacts`` for the rendered unit),
    ``$XDG_DATA_HOME/backlog-worker/artifacts``; else ``~/.local/share/backlog-worker/artifacts``.
    Never the run's directory nor a tmpfs: they are gone when the run or the host stops.
    """
    env = os.environ if environ is None else environ
    for var, leaf in (("STATE_DIRECTORY", "artifacts"), ("XDG_DATA_HOME", "backlog-worker")):
        # systemd joins several StateDirectory= paths with ':'; the first is ours.
        first = (env.get(var) or "").split(":", 1)[0]
        if os.path.isabs(first):
            path = Path(first) / leaf
            return (path if leaf == "artifacts" else path / "artifacts"), f"${var}"
    return Path.home() / ".local" / "share" / "backlog-worker" / "artifacts", "~/.local/share"


def path_component(name: str) -> str:
    """A tracker id as one harmless path component (never ``.``/``..``, never hidden): the
    ``<task id>/<run id>`` directories artifacts are copied under."""
    return re.sub(r"^\.", "_", re.sub(r"[^A-Za-z0-9._-]", "_", name)) or "_"


class _Stopped(Exception):
    pass


def digest_file(
    path: Path, copy_to: Path | None = None, stop: threading.Event | None = None
) -> FileDigest:
    """Read ``path`` once: its sha256 and size, and (with ``copy_to``) a copy written there.

    The size is the number of bytes hashed, so the two always agree even if the file changes
    meanwhile. Only regular files are accepted (a FIFO or device would block or never end):
    ValueError otherwise; OSError when it cannot be read or the copy cannot be written. The copy
    appears atomically (a temporary file in the same directory, fsynced, then renamed); its
    directories are created and it keeps the file's permission bits. ``stop`` (set by a
    cancelled caller) abandons the work between chunks, leaving no partial copy. The returned
    path is the copy's when copied.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # O_NONBLOCK: a FIFO
    with os.fdopen(fd, "rb") as src:
        mode = os.fstat(src.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path} is not a regular file")
        digest = hashlib.sha256()
        size = 0
        if copy_to is None:
            while chunk := src.read(_CHUNK):
                if stop is not None and stop.is_set():
                    raise _Stopped
                digest.update(chunk)
                size += len(chunk)
            return FileDigest(path.resolve(), digest.hexdigest(), size)
        dest = copy_to.absolute()
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.NamedTemporaryFile(  # noqa: SIM115 - renamed or removed below
            dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp", delete=False
        )
        try:
            with tmp:
                os.fchmod(tmp.fileno(), stat.S_IMODE(mode))  # the file's bits, not 0600
                while chunk := src.read(_CHUNK):
                    if stop is not None and stop.is_set():
                        raise _Stopped
                    digest.update(chunk)
                    size += len(chunk)
                    tmp.write(chunk)
                tmp.flush()
                os.fsync(tmp.fileno())
            os.replace(tmp.name, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp.name)
            raise
        return FileDigest(dest, digest.hexdigest(), size)
