"""Wake-ups across processes sharing one SQLite file: a Unix datagram socket per waiting instance.

SQLite tells no other connection that a commit happened; the rail's waiters of other processes
used to find out by polling (``PRAGMA data_version`` and the ``wakes`` counter, see
:mod:`.engine`), so new work waited half a poll interval on average before an idle worker saw
it. Here, an instance that has waiters (``wait_for_work``, ``wait``) binds a datagram socket in
the directory beside the rail (``RAIL.wake/``, mode 0700, the socket named ``<pid>.<n>.sock``)
and its event loop reads it (``add_reader`` on asyncio; a thread of its own on another loop);
every committed write that wakes waiters
(:func:`~tracker_client.rules.engine.wakes_waiters`, one send per group commit) sends one byte
to each socket there but its own instance's, without blocking. A byte wakes the receiving
instance's waiters at once, as a write of its own would (the rail's
:class:`~tracker_client.rules.engine.Changes`). Whoever writes sends: a worker, the CLI's
``submit``, the producer API, ``tracker serve``; no daemon, no systemd. While nobody of the
instance waits, the first byte stops its asyncio loop reading the socket until the next wait
begins (:meth:`WakeSockets.listen`): a worker draining beside other processes was woken by each
of their commits (~0.065 loop wake-ups per task with two processes), for nobody.

A socket nobody is bound to (``ECONNREFUSED``) whose process is gone is removed by the sender
that finds it, and by the next instance that binds. A full socket (``EAGAIN``: its owner has a
wake-up pending anyway) is skipped. The poll stays as the fallback: a writer of a release before
this one sends nothing and a datagram can be lost, which an instance with its socket bound
notices within a second (its poll then looks about once a second, :mod:`.engine`); a socket
path longer than the system's limit (:data:`SUN_PATH_MAX`) or a directory of another user means
no socket for this instance (logged once, with the reason), whose waiters then poll every
``poll_interval_s``. Only processes of the directory's owner can reach its sockets
(docs/operate/several-workers.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable

import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

__all__ = ["SUN_PATH_MAX", "WakeSockets"]

log = logging.getLogger("backlog_worker.tracker")

#: The longest socket path the system takes, in bytes (``sockaddr_un.sun_path`` is 108 bytes
#: on Linux, its terminating NUL included).
SUN_PATH_MAX = 107
#: A directory listing taken this soon after the directory's last change may have missed a
#: socket bound within the same file-system timestamp tick: it is taken again at the next send
#: until the directory has been quiet this long (nanoseconds; as git treats "racy" entries).
_RACY_NS = 2_000_000_000
#: How long a stop waits for the receiving thread (woken by the byte the stop sends it).
_JOIN_TIMEOUT_S = 5.0
_SUFFIX = ".sock"
_names = itertools.count()  # this process's socket numbers


def _never() -> bool:
    return False


def wake_dir(rail_path: str) -> str:
    """The directory of the rail's wake-up sockets: beside the file, symbolic links resolved
    (two processes naming one file differently share it)."""
    return os.path.realpath(rail_path) + ".wake"


def _pid_of(name: str) -> int | None:
    head = name.partition(".")[0]
    return int(head) if head.isdigit() else None


def _process_gone(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it exists (another user's)
        return False
    return False


class WakeSockets:
    """One instance's side of the rail's wake-up directory: its own socket (:meth:`listen`,
    while it has waiters) and the sends of its writes (:meth:`ring`). See the module."""

    def __init__(self, rail_path: str) -> None:
        self.path = wake_dir(rail_path)
        #: Set by a waking write inside its transaction; the first ``ring`` after the commit
        #: sends (once for a whole group commit). Read and written on the database thread.
        self.pending = False
        self._listing: tuple[str, ...] = ()
        self._stamp: tuple[int, int] | None = None
        self._trusted = False
        self._sender: socket.socket | None = None
        self._own: str | None = None  # this instance's socket name, never sent to
        self._receiver: _Receiver | None = None
        self._tried = False

    @property
    def listening(self) -> bool:
        """Whether this instance's socket is bound (False: its waiters rely on the poll)."""
        return self._receiver is not None

    # -- receiving ------------------------------------------------------------------------------
    def listen(self, wake: Callable[[], None], idle: Callable[[], bool] = _never) -> bool:
        """Bind this instance's socket (once; call on the event loop, before each wait): each
        byte received then calls ``wake`` on this loop. False, logged once with the reason,
        when it cannot be bound: the waiters then notice other processes' writes by the poll
        alone.

        ``idle``: whether nobody waits now. A byte that finds it so still calls ``wake``, and
        then the loop stops reading the socket until the next ``listen`` (on asyncio): the
        bytes of a busy neighbour's commits wait in the socket (those past its queue are not
        sent), not one loop wake-up each, and the next ``listen`` reads them and calls
        ``wake`` once for all of them. So a worker draining beside others is not woken by
        each of their commits (nobody waits), and a change that came meanwhile still moves
        the rail's change mark before the next wait looks at it."""
        if self._tried:
            if self._receiver is not None:
                self._receiver.resume()
            return self._receiver is not None
        self._tried = True
        name = f"{os.getpid()}.{next(_names)}{_SUFFIX}"
        where = os.path.join(self.path, name)
        size = len(os.fsencode(where))
        if size > SUN_PATH_MAX:
            log.warning(
                "rail wake-up socket %s is %d bytes long, over the system's limit of %d: "
                "waiters of this process notice other processes' work by polling "
                "(poll_interval_s); a shorter path to the rail file avoids it",
                where,
                size,
                SUN_PATH_MAX,
                extra={"action": "wake_socket_path_too_long"},
            )
            return False
        try:
            sock = self._bind(where)
        except OSError as exc:
            log.warning(
                "rail wake-up socket %s not bound (%s): waiters of this process notice other "
                "processes' work by polling (poll_interval_s)",
                where,
                exc.strerror or type(exc).__name__,
                extra={"action": "wake_socket_unavailable"},
            )
            return False
        self._own = name
        self._receiver = _Receiver(sock, where, wake, idle)
        return True

    def _bind(self, where: str) -> socket.socket:
        """A datagram socket bound at ``where``, the directory made first. A neighbour that
        closes removes the directory when it is left empty; a bind that loses that race makes
        it again, once."""
        for attempt in (1, 2):
            self._make_dir()
            self._sweep()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(where)  # our pid and number: a leftover of a dead namesake
                sock.bind(where)
            except FileNotFoundError:
                sock.close()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise AssertionError("unreachable")  # pragma: no cover

    def _make_dir(self) -> None:
        """The directory, 0700 and ours; a directory of another user (or not a directory) is
        refused (``PermissionError``), one left wider than 0700 by hand is narrowed."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.path, 0o700)
        st = os.lstat(self.path)
        if not stat.S_ISDIR(st.st_mode):
            raise PermissionError(errno.EACCES, "not a directory")
        if st.st_uid != os.geteuid():
            raise PermissionError(errno.EACCES, f"the directory belongs to uid {st.st_uid}")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(self.path, 0o700)

    def _sweep(self) -> None:
        """Remove the sockets of processes that are gone and that nobody is bound to."""
        with os.scandir(self.path) as entries:
            names = [e.name for e in entries if e.name.endswith(_SUFFIX)]
        if not names:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            probe.setblocking(False)
            for name in names:
                if _process_gone(_pid_of(name)):
                    self._send(probe, name)  # refused: removed; bound (another pid space): woken

    async def aclose(self) -> None:
        """Stop receiving: this instance's socket goes (and its thread, if it has one).
        Idempotent."""
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            await receiver.aclose()
            with contextlib.suppress(OSError):  # not empty: a neighbour still listens
                os.rmdir(self.path)  # the last one out leaves no directory beside the rail

    def close_sender(self) -> None:
        """Close the socket the writes send from; call once no write can run (the database
        is closed): the database thread sends from it."""
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    # -- sending (on the database thread) -------------------------------------------------------
    def ring(self) -> None:
        """After a commit that set :attr:`pending`: one byte to every other instance's socket
        (never blocking; failures are the poll's to cover)."""
        if not self.pending:
            return
        self.pending = False
        names = self._names()
        if not names or names == (self._own,):
            return
        sock = self._sender
        if sock is None:
            sock = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
        own = self._own
        for name in names:
            if name != own:
                self._send(sock, name)

    def _send(self, sock: socket.socket, name: str) -> None:
        where = os.path.join(self.path, name)
        try:
            sock.sendto(b"\0", where)
        except BlockingIOError:
            pass  # its queue is full: a wake-up is pending there already
        except (ConnectionRefusedError, FileNotFoundError):
            # Nobody is bound to it: its instance closed or its process died.
            if _process_gone(_pid_of(name)):
                with contextlib.suppress(OSError):
                    os.unlink(where)
                self._stamp = None
        except OSError:
            pass  # anything else (a path too long, no permission): the poll covers it

    def _names(self) -> tuple[str, ...]:
        """The sockets in the directory, listed again only when it changed (or may have)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return ()
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp == self._stamp and self._trusted:
            return self._listing
        now = time.time_ns()
        try:
            with os.scandir(self.path) as entries:
                self._listing = tuple(e.name for e in entries if e.name.endswith(_SUFFIX))
        except OSError:
            return ()
        self._stamp = stamp
        self._trusted = now - st.st_mtime_ns > _RACY_NS
        return self._listing


class _Receiver:
    """What waits on one instance's socket and calls ``wake`` on the event loop per burst of
    bytes: on asyncio the loop itself (``add_reader``: no thread, no hand-off between threads,
    which a loaded machine makes slow), else a thread blocking on it."""

    def __init__(
        self, sock: socket.socket, where: str, wake: Callable[[], None], idle: Callable[[], bool]
    ) -> None:
        self._sock = sock
        self._where = where
        self._wake = wake
        self._idle = idle
        #: The asyncio loop does not read the socket now (nobody waited at the last byte).
        self.paused = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # not asyncio (trio): a thread hands the wake-up over
        if self._loop is not None:
            sock.setblocking(False)
            self._loop.add_reader(sock.fileno(), self._readable)
            return
        self._token = anyio.lowlevel.current_token()
        # Blocking, no timeout: with one, CPython waits for readability before every recv,
        # MSG_DONTWAIT included, and the drain below would block. A stop sends it a byte.
        sock.setblocking(True)
        self._thread = threading.Thread(target=self._run, name="rail-wake", daemon=True)
        self._thread.start()

    def _drain(self) -> bool:
        """Read every byte waiting (a burst wakes once); whether there was one."""
        got = False
        with contextlib.suppress(OSError):
            while True:
                self._sock.recv(16, socket.MSG_DONTWAIT)
                got = True
        return got

    def _readable(self) -> None:
        """On the asyncio loop: bytes arrived. Nobody waiting: the loop stops reading the
        socket until :meth:`resume`."""
        self._drain()
        if self._idle() and self._loop is not None and not self._stop.is_set():
            self._loop.remove_reader(self._sock.fileno())
            self.paused = True
        self._wake()

    def resume(self) -> None:
        """A wait begins (on the loop): the loop reads the socket again; bytes that came while
        it did not call ``wake`` once."""
        if not self.paused or self._loop is None or self._stop.is_set():
            return
        self.paused = False
        got = self._drain()
        self._loop.add_reader(self._sock.fileno(), self._readable)
        if got:
            self._wake()

    def _run(self) -> None:
        """The thread (not on asyncio)."""
        sock = self._sock
        while not self._stop.is_set():
            try:
                sock.recv(16)
            except OSError:
                return
            self._drain()
            if self._stop.is_set():
                return
            with contextlib.suppress(Exception):  # the loop is gone: the tracker is closing
                anyio.from_thread.run_sync(self._wake, token=self._token)

    async def aclose(self) -> None:
        """Stop receiving; close and remove the socket."""
        self._stop.set()
        if self._loop is not None:
            with contextlib.suppress(Exception):  # a loop already closed has no reader left
                self._loop.remove_reader(self._sock.fileno())
        elif self._thread is not None:
            await anyio.to_thread.run_sync(self._end_thread)
        with contextlib.suppress(OSError):
            os.unlink(self._where)
        self._sock.close()

    def _end_thread(self) -> None:
        """Wake the thread with a byte and join it (a thread call)."""
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(b"\0", self._where)
        if self._thread is not None:
            self._thread.join(_JOIN_TIMEOUT_S)
