"""systemd integration: the ``sd_notify`` protocol, the watchdog, and service credentials.

The protocol is small enough that a dependency would cost more than it saves: the ``sdnotify``
package sends on a blocking socket and knows nothing of ``WATCHDOG_USEC``/``WATCHDOG_PID`` or
reloads, and ``systemd-python`` needs libsystemd headers at install time. Here it is one AF_UNIX
datagram per message to ``$NOTIFY_SOCKET`` (a path, or an abstract socket written ``@name``),
sent from a non-blocking socket so a slow or gone service manager can never stall the event
loop. Every failure is logged once and swallowed: supervision is best effort, the work is not.
Without ``$NOTIFY_SOCKET`` every call is a no-op, so the daemon calls the same methods whether
or not it runs under systemd.

Typical use (the daemon)::

    notifier = Notifier.from_env(unset_environment=True)  # children must not inherit it
    monitor = ProgressMonitor(stall_after_s=60)  # worker.progress; the daemon's: Worker.progress
    async with anyio.create_task_group() as tg:
        await tg.start(Watchdog(notifier).run, monitor)
        ...  # tracker answered, executors ready
        notifier.ready(status="idle: 0/4 slots busy")

``Watchdog.run`` pings only while its probe reports progress, and since it is a task on the
event loop, a loop that is blocked stops the pings too; after ``WatchdogSec`` systemd restarts
the service.

It may touch ``$NOTIFY_SOCKET`` (one datagram socket), the ``NOTIFY_SOCKET`` and ``WATCHDOG_*``
variables (unset for children on request), ``$CREDENTIALS_DIRECTORY`` (:func:`load_credential`) and
the log (:mod:`worker.logs`); it knows nothing of trackers or tasks.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from types import TracebackType

import anyio
from anyio.abc import TaskStatus

from worker.logs import redact

__all__ = [
    "Notifier",
    "Watchdog",
    "format_status",
    "load_credential",
    "report_status",
]

logger = logging.getLogger("backlog_worker.systemd")

# Variables systemd hands the main process; removed from the environment on request so that
# executor subprocesses don't inherit a socket they may not write to (NotifyAccess=main).
_NOTIFY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def _socket_address(value: str) -> str | None:
    """Map ``$NOTIFY_SOCKET`` to an AF_UNIX address, or None when it is not one we can use."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        # Linux abstract namespace: leading NUL, no trailing NUL, no filesystem entry.
        return "\0" + value[1:]
    return None


def _one_line(text: str) -> str:
    """Collapse a status text to one line (a newline would start a new protocol assignment)
    and mask secrets: ``systemctl status`` shows STATUS= to every local user."""
    return redact(" ".join(text.split()))


class Notifier:
    """Sends ``sd_notify`` messages to the service manager; a no-op without ``NOTIFY_SOCKET``.

    Every method returns whether a datagram was handed to the kernel (False when disabled or
    when the send failed); none raises. Thread-safe enough for its use: one lock guards the
    lazily created socket.
    """

    def __init__(
        self,
        notify_socket: str | None = None,
        *,
        watchdog_usec: str | None = None,
        watchdog_pid: str | None = None,
    ) -> None:
        """Target ``notify_socket`` (``$NOTIFY_SOCKET`` syntax: a path or ``@abstract``)."""
        self._raw_socket = notify_socket or None
        self._address = _socket_address(notify_socket) if notify_socket else None
        self._watchdog_usec = watchdog_usec
        self._watchdog_pid = watchdog_pid
        self._sock: socket.socket | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._logged_errors: set[str] = set()
        if notify_socket and self._address is None:
            # e.g. systemd 254's vsock: addresses; not used for local services.
            self._log_once("address", "NOTIFY_SOCKET %r is not an AF_UNIX address", notify_socket)

    @classmethod
    def from_env(
        cls,
        env: MutableMapping[str, str] | None = None,
        *,
        unset_environment: bool = False,
    ) -> Notifier:
        """Build from ``$NOTIFY_SOCKET``, ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID``.

        With ``unset_environment=True`` those variables are removed from ``env`` (default
        ``os.environ``) afterwards, as ``sd_notify(unset_environment=1)`` does, so that
        executor subprocesses started later do not inherit them.
        """
        environ: MutableMapping[str, str] = os.environ if env is None else env
        notifier = cls(
            environ.get("NOTIFY_SOCKET"),
            watchdog_usec=environ.get("WATCHDOG_USEC"),
            watchdog_pid=environ.get("WATCHDOG_PID"),
        )
        if unset_environment:
            for name in _NOTIFY_ENV:
                environ.pop(name, None)
        return notifier

    @property
    def enabled(self) -> bool:
        """True when a usable notify socket is configured (and the notifier is not closed)."""
        return self._address is not None and not self._closed

    def __repr__(self) -> str:
        """Show the target socket, never anything else."""
        return f"Notifier(notify_socket={self._raw_socket!r})"

    # -- protocol messages -------------------------------------------------------------------

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=value`` assignments as one datagram (the raw protocol)."""
        if not assignments or not self.enabled:
            return False
        payload = "\n".join(assignments).encode("utf-8", "replace")
        return self._send(payload)

    def ready(self, status: str | None = None) -> bool:
        """``READY=1``: start-up finished (also sent again after a reload completed)."""
        extra = (f"STATUS={_one_line(status)}",) if status is not None else ()
        return self.notify("READY=1", *extra)

    def status(self, text: str) -> bool:
        """``STATUS=text``: the one-line status ``systemctl status`` shows."""
        return self.notify(f"STATUS={_one_line(text)}")

    def stopping(self, status: str | None = None) -> bool:
        """``STOPPING=1``: shutdown (drain) has begun."""
        extra = (f"STATUS={_one_line(status)}",) if status is not None else ()
        return self.notify("STOPPING=1", *extra)

    def reloading(self, status: str | None = None) -> bool:
        """``RELOADING=1`` with ``MONOTONIC_USEC`` (required by systemd for reload tracking).

        Send :meth:`ready` once the new configuration is in effect.
        """
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        extra = (f"STATUS={_one_line(status)}",) if status is not None else ()
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={now_usec}", *extra)

    def extend_timeout(self, seconds: float) -> bool:
        """``EXTEND_TIMEOUT_USEC``: ask for ``seconds`` more from now (start, stop or reload).

        systemd extends the running start/stop/reload timeout so that it ends no earlier than
        ``seconds`` from now; send it again before that runs out to keep extending.
        """
        usec = max(0, round(seconds * 1_000_000))
        return self.notify(f"EXTEND_TIMEOUT_USEC={usec}")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the keep-alive ping. Prefer :class:`Watchdog` over calling this."""
        return self.notify("WATCHDOG=1")

    def watchdog_trigger(self) -> bool:
        """``WATCHDOG=trigger``: ask systemd to treat the watchdog as expired right now."""
        return self.notify("WATCHDOG=trigger")

    def watchdog_interval(self) -> float | None:
        """Seconds between pings (half of ``WATCHDOG_USEC``), or None when no watchdog is set.

        ``WATCHDOG_PID``, when present, must name this process; otherwise the watchdog belongs
        to another process (we were forked or exec'd by the main process) and this is None.
        """
        if self._watchdog_usec is None:
            return None
        if self._watchdog_pid is not None:
            try:
                pid = int(self._watchdog_pid)
            except ValueError:
                self._log_once("pid", "ignoring WATCHDOG_PID=%r: not a number", self._watchdog_pid)
                return None
            if pid != os.getpid():
                return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            self._log_once("usec", "ignoring WATCHDOG_USEC=%r: not a number", self._watchdog_usec)
            return None
        if usec <= 0:
            return None
        return usec / 2 / 1_000_000

    # -- socket handling ---------------------------------------------------------------------

    def _send(self, payload: bytes) -> bool:
        with self._lock:
            if self._closed or self._address is None:
                return False
            try:
                if self._sock is None:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                    sock.setblocking(False)
                    self._sock = sock
                self._sock.sendto(payload, self._address)
            except OSError as exc:
                # Full queue (EAGAIN), manager gone (ECONNREFUSED/ENOENT), permissions...: drop
                # the message. The next status or ping supersedes it anyway.
                name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
                self._log_once(name, "sd_notify to %s failed: %s", self._raw_socket, exc)
                return False
            return True

    def _log_once(self, key: str, msg: str, *args: object) -> None:
        if key in self._logged_errors:
            return
        self._logged_errors.add(key)
        logger.warning(
            msg + " (further errors of this kind are not logged)",
            *args,
            extra={"action": "sd_notify_failed"},
        )

    def close(self) -> None:
        """Close the socket; later calls are no-ops. Idempotent."""
        with self._lock:
            self._closed = True
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def __enter__(self) -> Notifier:
        """Use as a context manager that closes the socket at exit."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the socket."""
        self.close()


class Watchdog:
    """Pings ``WATCHDOG=1`` at half of ``WatchdogSec`` while the probe reports progress."""

    def __init__(self, notifier: Notifier, *, interval_s: float | None = None) -> None:
        """Use ``interval_s`` instead of the one derived from ``$WATCHDOG_USEC`` (tests)."""
        self.notifier = notifier
        self.interval_s = interval_s if interval_s is not None else notifier.watchdog_interval()
        self.pings = 0
        self.withheld = 0

    async def run(
        self,
        progress_probe: Callable[[], bool],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Ping until cancelled; return at once when there is no watchdog or no socket.

        ``progress_probe`` is called on the event loop once per interval and must be cheap and
        non-blocking; an exception from it counts as "no progress". A missed ping is only
        logged on the transition (stalled / recovered), not every interval.
        """
        interval = self.interval_s
        task_status.started()
        if interval is None or not self.notifier.enabled:
            return
        stalled = False
        while True:
            try:
                progressing = bool(progress_probe())
                reason = None if progressing else _probe_reason(progress_probe)
            except Exception as exc:  # a broken probe must not kill the daemon
                progressing, reason = False, f"progress probe raised {exc!r}"
            if progressing:
                self.notifier.watchdog()
                self.pings += 1
                if stalled:
                    stalled = False
                    logger.info(
                        "progress resumed, watchdog pings resumed",
                        extra={"action": "watchdog_resumed"},
                    )
            else:
                self.withheld += 1
                if not stalled:
                    stalled = True
                    logger.error(
                        "withholding watchdog ping: %s; systemd restarts the service if this lasts",
                        reason or "progress probe reported no progress",
                        extra={"action": "watchdog_withheld"},
                    )
            await anyio.sleep(interval)


async def report_status(
    notifier: Notifier,
    status: Callable[[], str],
    *,
    interval_s: float = 2.0,
    extend_timeout: Callable[[], float | None] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Every ``interval_s`` until cancelled: ``STATUS=status()`` when the text changed, and
    ``EXTEND_TIMEOUT_USEC`` when ``extend_timeout()`` returns seconds (e.g. while draining:
    the grace left plus a margin larger than ``interval_s``). Returns at once without a socket.
    """
    task_status.started()
    if not notifier.enabled:
        return
    last: str | None = None
    while True:
        try:
            text = status()
            extension = extend_timeout() if extend_timeout is not None else None
        except Exception as exc:  # a broken callback must not kill the daemon
            text, extension = f"status unavailable: {exc!r}", None
        if text != last:
            notifier.status(text)
            last = text
        if extension is not None and extension > 0:
            notifier.extend_timeout(extension)
        await anyio.sleep(interval_s)


def format_status(
    *,
    state: str,
    busy: int,
    slots: int,
    done: int,
    failed: int,
    last_error: str | None = None,
) -> str:
    """The one-line ``STATUS=`` text, e.g.
    ``running: 3/4 slots busy, 120 done, 2 failed; last error: tracker unavailable``."""
    text = f"{state}: {busy}/{slots} slots busy, {done} done, {failed} failed"
    if last_error:
        error = " ".join(last_error.split())
        text += "; last error: " + (error if len(error) <= 200 else error[:199] + "…")
    return text


def _probe_reason(probe: Callable[[], bool]) -> str | None:
    problem = getattr(probe, "problem", None)
    if callable(problem):
        result = problem()
        return result if isinstance(result, str) else None
    return None


def load_credential(
    name: str, env: Mapping[str, str] | None = None, *, strip: bool = True
) -> str | None:
    """Read the systemd credential ``name`` from ``$CREDENTIALS_DIRECTORY``, or None.

    A unit's ``LoadCredential=api-token:/etc/backlog-worker/api-token`` makes the file
    readable by the service (and only it) as ``$CREDENTIALS_DIRECTORY/api-token``. Returns
    None when there is no credentials directory or no such credential; a credential that
    exists but cannot be read raises ``OSError`` (the caller maps it to a ``ConfigError``).
    Trailing whitespace (the newline ``echo`` leaves) is stripped unless ``strip=False``.
    """
    environ = os.environ if env is None else env
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if not directory or "/" in name or name in ("", ".", ".."):
        return None
    path = Path(directory) / name
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return text.strip() if strip else text
