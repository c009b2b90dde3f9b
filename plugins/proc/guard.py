"""Executors die with their worker, even when the worker itself is killed with ``SIGKILL``.

:func:`plugins.proc.process.run_process` starts every executor in its own session (so it
leads a process group holding everything it forks) and ends that group itself when the run
ends. That needs a living worker: after ``kill -9`` of the worker (OOM killer, crash, a
supervisor without cgroups) nobody would, and once the lease expires the task would run
again elsewhere while the orphan is still writing. The *guard* closes that gap:

- one small helper process per worker process (started lazily by the first executor: one
  ``posix_spawn``, ~0.3 ms in the worker; then idle, ~9.5 MiB RSS), in its own session, ignoring
  ``SIGINT``/``SIGTERM``/``SIGHUP``/``SIGQUIT``;
- it reads a pipe whose only write end the worker holds (close-on-exec, so no executor inherits
  it). The worker writes ``+PGID`` once an executor started and ``-PGID`` once its group is gone:
  two small non-blocking writes per run (a few microseconds), nothing else;
- when the pipe reaches EOF, the worker process is gone (however it died; a clean exit too):
  the guard sends ``SIGKILL`` to every group still registered and to every process still in their
  sessions (a grandchild that moved to a group of its own with ``setpgid``), then exits.

Why not ``PR_SET_PDEATHSIG``: it needs code between ``fork`` and ``exec``, which anyio's
``open_process`` does not offer, and Python's ``preexec_fn`` may deadlock in a multi-threaded
process (the worker has threads); it would also cover only the direct child (a grandchild
survives its death) and fires when the *thread* that forked exits, not the process.

Limits: a descendant that starts a session of its own (``setsid``) escapes the guard, as it escapes
the group termination of a normal run; only a cgroup holds it, which is what systemd's unit gives
(``KillMode=mixed``: once the main process has exited, every remaining process of the unit's
cgroup gets ``SIGKILL``). An executor is registered before its program runs: it starts as a
trampoline that waits until the worker has written its group to the guard's pipe
(:mod:`plugins.proc.gate`), and exits without running anything if the worker dies first. Nothing
is covered when the guard itself is killed together with the
worker (a worker notices a dead or stuck guard at its next executor start or end, starts a new
one and registers its running groups again). A worker that is alive but frozen (``SIGSTOP``, a
blocked event loop) keeps its pipe open: the guard does nothing until it dies.

It may touch one helper process (spawned with :func:`os.posix_spawn`), its pipe, ``/proc`` (a
group's and a session's members) and signals to the registered groups; it imports nothing of the
project.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path

__all__ = [
    "group_members",
    "guard_pid",
    "guard_ready",
    "kill_deadline",
    "register_group",
    "unregister_group",
]

logger = logging.getLogger("backlog_worker.executor.proc")

#: Set by the worker around an executor: returns the ``anyio.current_time()`` by which no process
#: of the run may live any more (the lease's end, less a margin: past it the task may be running
#: elsewhere). :func:`~plugins.proc.process.run_process` reads it when it starts a process and
#: cuts the ``SIGTERM`` grace of a termination short so that ``SIGKILL`` comes before it.
kill_deadline: ContextVar[Callable[[], float] | None] = ContextVar(
    "backlog_worker_kill_deadline", default=None
)

#: The guard's program (run with ``python -I -S -c``: no site, no environment, starts in ~10 ms).
GUARD_SCRIPT = r"""
import os, signal, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN)  # only EOF (the worker is gone) ends the guard
os.closerange(3, 1 << 16)
os.chdir("/")  # hold no directory busy (nor a mount point)
groups, pending = set(), b""
while True:
    data = os.read(0, 65536)
    if not data:
        break
    *lines, pending = (pending + data).split(b"\n")
    for line in lines:
        if line[:1] == b"+" and line[1:].isdigit():
            groups.add(int(line[1:]))
        elif line[:1] == b"-" and line[1:].isdigit():
            groups.discard(int(line[1:]))

def kill(pid, group):
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except OSError:
        pass

def session_members():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/" + entry + "/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] not in (b"Z", b"X") and int(fields[3]) in groups:
                found.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return found

for pgid in groups:
    kill(pgid, True)
# members of their sessions in other groups (setpgid); rescan: one may fork during a scan
for _ in range(100 if groups and os.path.isdir("/proc") else 0):
    members = session_members()
    if not members:
        break
    for pid in members:
        kill(pid, False)
    time.sleep(0.02)
"""

#: Shown in ``ps`` after the script, so an operator can tell what the helper is.
GUARD_NAME = "backlog-worker-executor-guard"


class _Guard:
    """The guard of this process: its pid and the write end of its pipe."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd


_lock = threading.Lock()
_guard: _Guard | None = None
_live: set[int] = set()  # process groups registered with the guard and not yet gone
_zombies: set[int] = set()  # guards we dropped and have not reaped yet
_retry_at = 0.0  # monotonic time before which a failed guard start is not retried
#: Seconds between attempts to start a guard after one failed.
_RETRY_S = 30.0


def _reset_after_fork() -> None:
    # a forked child (multiprocessing) must not keep its parent's guard alive nor write to it
    global _guard, _lock
    _lock = threading.Lock()
    if _guard is not None:
        with contextlib.suppress(OSError):
            os.close(_guard.fd)
    _guard = None
    _live.clear()
    _zombies.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


def _start() -> _Guard | None:
    """Spawn a guard reading a fresh pipe; None (logged) when it cannot be started."""
    global _retry_at
    if time.monotonic() < _retry_at:
        return None  # it failed a moment ago: don't retry (and log) on every run
    try:
        if not sys.executable:
            raise OSError("no path to the Python interpreter")
        read_fd, write_fd = os.pipe()  # both close-on-exec: no executor inherits either end
    except OSError as exc:
        _start_failed(exc)
        return None
    try:
        if read_fd < 3:  # dup2 onto itself would keep close-on-exec: move it out of the way
            moved = fcntl.fcntl(read_fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(read_fd)
            read_fd = moved
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", GUARD_SCRIPT, GUARD_NAME, str(os.getpid())],
            {},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, read_fd, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            ],
            setsid=True,  # neither a terminal's ^C nor a signal to the worker's group reaches it
        )
    except (OSError, NotImplementedError) as exc:
        os.close(write_fd)
        _start_failed(exc)
        return None
    finally:
        os.close(read_fd)
    os.set_blocking(write_fd, False)  # a stuck guard must never block the event loop
    logger.debug("executor guard started as pid %d", pid, extra={"action": "process_guard"})
    return _Guard(pid, write_fd)


def _start_failed(exc: BaseException) -> None:
    global _retry_at
    _retry_at = time.monotonic() + _RETRY_S
    logger.warning(
        "cannot start the executor guard (%s): executors are not guarded against kill -9 of the "
        "worker; retrying in %.0f s",
        exc,
        _RETRY_S,
        extra={"action": "process_guard_failed"},
    )


def _drop(guard: _Guard) -> None:
    """Forget a guard that stopped reading: close our end, make sure it is gone, reap it."""
    os.close(guard.fd)
    with contextlib.suppress(OSError):
        os.kill(guard.pid, signal.SIGKILL)  # it must not kill groups that are still running
    _zombies.add(guard.pid)
    _reap()


def _reap() -> None:
    """Reap guards we dropped (SIGKILL takes a moment; never block the event loop on it)."""
    for pid in list(_zombies):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid  # someone else reaped it
        if done:
            _zombies.discard(pid)


def _send(line: bytes) -> None:
    """Write ``line`` to the guard (starting one if needed), replacing a dead or stuck guard."""
    global _guard
    if _zombies:
        _reap()
    for _attempt in range(2):
        if _guard is None:
            _guard = _start()
            if _guard is None:
                return
            # a new guard knows nothing yet: tell it every group still running (this one too)
            line = b"".join(b"+%d\n" % pgid for pgid in sorted(_live)) + line
        try:
            view = memoryview(line)
            while view:  # a pipe write may be partial; a full pipe raises BlockingIOError
                view = view[os.write(_guard.fd, view) :]
            return
        except OSError as exc:  # EPIPE: it died; EAGAIN: it stopped reading
            logger.warning(
                "executor guard %d is gone or stuck (%s): starting a new one",
                _guard.pid,
                exc.strerror or exc,
                extra={"action": "process_guard_restarted"},
            )
            _drop(_guard)
            _guard = None


def _send_safely(line: bytes) -> None:
    # the executor is already running: a guard problem must never fail (or orphan) the run
    try:
        _send(line)
    except Exception:
        logger.exception("executor guard failed", extra={"action": "process_guard_failed"})


def register_group(pgid: int) -> None:
    """Have the guard ``SIGKILL`` group ``pgid`` (and its session) if this process dies first."""
    with _lock:
        _live.add(pgid)
        _send_safely(b"+%d\n" % pgid)


def unregister_group(pgid: int) -> None:
    """Group ``pgid`` is gone: the guard must not touch that number again (pids are reused)."""
    with _lock:
        if pgid in _live:
            _live.discard(pgid)
            _send_safely(b"-%d\n" % pgid)


def guard_ready() -> bool:
    """Start this process's guard if none runs yet; whether one runs now. A spawn gates its
    child (:mod:`plugins.proc.gate`) only then: without a guard there is nothing to wait for."""
    with _lock:
        if _guard is None:
            _send_safely(b"")  # starts one and hands it the groups still running
        return _guard is not None


def guard_pid() -> int | None:
    """The pid of this process's guard, None before the first executor (for diagnostics)."""
    with _lock:
        return None if _guard is None else _guard.pid


def group_members(pgid: int, leader: int) -> list[int]:
    """Live (non-zombie) pids of process group ``pgid``; reaps zombies that are our children.

    Runs in a worker thread (it reads ``/proc``). Without ``/proc`` it trusts ``killpg(pgid, 0)``.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        return []  # no process of ours is left in it
    proc = Path("/proc")
    if not proc.is_dir():
        return [pgid]
    me = os.getpid()
    members: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parens, so split after it
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 3 or int(fields[2]) != pgid:
            continue
        pid, state, ppid = int(entry.name), fields[0], int(fields[1])
        if state in ("Z", "X"):
            # an orphaned grandchild re-parented to us (we may be a subreaper or pid 1): reap it
            if ppid == me and pid != leader:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            continue
        members.append(pid)
    return members
