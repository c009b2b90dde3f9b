"""The gate: an executor's program runs only once the guard knows its process group.

The guard (:mod:`plugins.proc.guard`) can only kill a group it was told about, and the worker
learns the group's id (the child's pid) only once the child exists. Spawned directly, the child
would run its program from the first instant, while the worker registers it a few event-loop steps
later: a worker killed in between left an executor nobody would kill (seen once in 96 kills: it
wrote its result 382 ms after the kill). So every guarded child starts as a tiny trampoline
(``python -I -S``: no site, no environment, no working directory on ``sys.path``) that

1. blocks reading the *go* pipe, whose only write end the worker holds;
2. on EOF (the worker died before opening the gate) exits 125 without running anything;
3. on a byte (the worker has written the group to the guard's pipe, so the guard kills it if the
   worker dies from now on), restores what the interpreter changed (``SIGPIPE`` and ``SIGXFSZ``
   back to their default, ``LC_CTYPE`` as given) and ``exec``\\ s the program in place: same pid,
   same group, same pipes;
4. if that ``exec`` fails, writes the ``errno`` to the *status* pipe (closed on a successful
   ``exec``), which :func:`~plugins.proc.process.run_process` turns into the same
   :class:`~plugins.proc.outcome.SpawnError` a direct spawn raises.

The price is one interpreter start per executor before its program runs (~8 ms of CPU; measured
in docs/operate/long-running.md), paid only while a guard runs (without one there is nothing to
wait for).

It may touch the two pipes of a spawn and the interpreter's path (:data:`sys.executable`); it
imports nothing of the project.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence

__all__ = ["GATE_NAME", "Gate"]

#: The trampoline (run with ``python -I -S -c``); argv: name, go fd, status fd, LC_CTYPE, program.
GATE_SCRIPT = r"""
import os, sys, _signal as signal  # _signal: the signal module would import enum (~10 ms)
_, _name, go, status, ctype, *argv = sys.argv
go, status = int(go), int(status)
if not os.read(go, 1):
    os._exit(125)  # the worker died before the guard knew this group: run nothing
os.close(go)
os.set_inheritable(status, False)  # closed by a successful exec: EOF says it worked
for name in ("SIGPIPE", "SIGXFSZ"):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
env = os.environb
if ctype[:1] == "=":
    env[b"LC_CTYPE"] = os.fsencode(ctype[1:])
else:
    env.pop(b"LC_CTYPE", None)  # set by the interpreter's C-locale coercion, not by the caller
try:
    os.execvpe(argv[0], argv, env)
except OSError as exc:
    os.write(status, b"%d" % (exc.errno or 0))
    os._exit(127)
"""

#: Shown in ``ps`` while the trampoline waits, so an operator can tell what it is.
GATE_NAME = "backlog-worker-executor-gate"


class Gate:
    """The pipes of one gated spawn: build the argv, then :meth:`spawned`, :meth:`open`, and
    :meth:`exec_error` once the process has exited; :meth:`close` in any case."""

    def __init__(self) -> None:
        self._go_r, self._go_w = os.pipe()  # close-on-exec: only the trampoline gets its end
        try:
            self._status_r, self._status_w = os.pipe()
        except OSError:
            os.close(self._go_r)
            os.close(self._go_w)
            raise
        self._fds = {self._go_r, self._go_w, self._status_r, self._status_w}

    @property
    def child_fds(self) -> tuple[int, int]:
        """The descriptors the trampoline inherits (``pass_fds``)."""
        return (self._go_r, self._status_w)

    def argv(self, args: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """The trampoline's argv that runs ``args`` once opened (``env`` is the child's)."""
        ctype = env.get("LC_CTYPE")
        marker = "-" if ctype is None else "=" + ctype
        return [
            sys.executable,
            "-I",
            "-S",
            "-c",
            GATE_SCRIPT,
            GATE_NAME,
            str(self._go_r),
            str(self._status_w),
            marker,
            *args,
        ]

    def _close(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def spawned(self) -> None:
        """The child exists: drop our copies of its ends (its EOF must be its own)."""
        self._close(self._go_r)
        self._close(self._status_w)

    def open(self) -> None:
        """Let the program run (call once the guard knows the group). A trampoline already
        killed is fine: there is nothing left to let through."""
        if self._go_w in self._fds:
            with contextlib.suppress(OSError):
                os.write(self._go_w, b"\n")
            self._close(self._go_w)

    def exec_error(self, program: str) -> OSError | None:
        """Why the program could not be ``exec``'d, or None (it ran, or the gate never opened).
        Call once the process has exited: the status pipe is then at EOF or holds the errno."""
        if self._status_r not in self._fds:
            return None
        os.set_blocking(self._status_r, False)
        try:
            data = os.read(self._status_r, 32)
        except OSError:
            return None
        finally:
            self._close(self._status_r)
        if not data.isdigit():
            return None
        code = int(data)
        return OSError(code, os.strerror(code), program)

    def close(self) -> None:
        """Close every descriptor still open (idempotent)."""
        for fd in list(self._fds):
            self._close(fd)
