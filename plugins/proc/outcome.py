"""What running a subprocess answers: its result, and the clear error when it cannot start.

A failed ``exec`` names the cause in words (missing working directory, no such executable,
argument list too large, not executable), with ``reason`` for callers that branch on it.

No I/O: it names what the ``OSError`` says; of the rail it uses :mod:`tracker_client.errors` only.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tracker_client.errors import ExecutorError

__all__ = ["ProcessResult", "SpawnError", "spawn_error"]


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """How a process ended and what it printed.

    ``returncode`` follows :mod:`subprocess`: negative ``-N`` when killed by signal ``N``, in which
    case ``signal`` is ``N`` (else None). ``stdout`` keeps the first ``max_capture_bytes`` bytes
    (plus a marker when cut); ``stderr`` keeps the last ones (marker first when cut).
    """

    returncode: int
    signal: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    pid: int
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the process exited with status 0."""
        return self.returncode == 0


class SpawnError(ExecutorError):
    """The program could not be started. ``reason`` is a stable code: ``not_found``,
    ``not_executable``, ``argument_too_large``, ``bad_argument``, ``cwd_missing`` or ``os_error``.

    ``argument_too_large`` and ``bad_argument`` depend on the task's data only, so retrying the
    same task cannot help; the others may be fixed on the host.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def permanent(self) -> bool:
        """True when a retry of the same arguments cannot succeed."""
        return self.reason in ("argument_too_large", "bad_argument")


def spawn_error(argv: Sequence[str], cwd: Path, exc: OSError) -> SpawnError:
    """The :class:`SpawnError` that names why ``argv`` could not start in ``cwd``."""
    program = argv[0]
    if exc.errno == errno.E2BIG:
        size = sum(len(os.fsencode(a)) + 1 for a in argv)
        biggest = max(len(os.fsencode(a)) for a in argv)
        return SpawnError(
            f"cannot start {program!r}: argument list too large ({size} bytes in total, "
            f"largest argument {biggest} bytes); pass big data on stdin or in a file instead",
            reason="argument_too_large",
        )
    if (
        isinstance(exc, FileNotFoundError | NotADirectoryError)
        and exc.filename is not None
        and os.fsdecode(exc.filename) == os.fsdecode(cwd)
    ):
        return SpawnError(
            f"cannot start {program!r}: working directory {cwd} is missing", reason="cwd_missing"
        )
    if isinstance(exc, FileNotFoundError):
        return SpawnError(
            f"cannot start {program!r}: no such executable (searched PATH)", reason="not_found"
        )
    if isinstance(exc, PermissionError):
        return SpawnError(
            f"cannot start {program!r}: permission denied (not executable?)",
            reason="not_executable",
        )
    if exc.errno == errno.ENOEXEC:
        return SpawnError(
            f"cannot start {program!r}: not an executable format", reason="not_executable"
        )
    return SpawnError(f"cannot start {program!r}: {exc.strerror or exc}", reason="os_error")
