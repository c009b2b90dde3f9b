"""Wake-ups across hosts: ``LISTEN/NOTIFY`` on the rail's channel.

A write that may make work claimable or revoke a lease (the embedded rail's waking set: not
claims, heartbeats, events, artifacts, the store, an idle maintenance pass) sends
``pg_notify(channel, instance)`` inside its transaction, so the notification leaves at commit and
never for a rolled-back write. Each tracker instance with waiters keeps one listening connection
(:class:`Listener`); a notification of another instance wakes this instance's waiters on their
event loop. Its own notifications are ignored: the write already woke them in process.

On asyncio the event loop itself reads the listening socket (``add_reader``): a NOTIFY wakes
the loop directly, with no thread to wake first and no hand-off from it (the wake-up is on the
path of every pickup: docs/benchmarks/pickup.md). A thread of its own still opens
the connection and ``LISTEN`` s (a blocking connect, reconnects with a back-off), then hands it
to the loop and waits until the loop reports it lost. Under another event loop (trio) that
thread reads the notifications too and hands each wake-up to the loop.

While it listens the connection also holds a session advisory lock of this instance
(:func:`holder_of`): the sign of life a create checks before it claims for one of this
instance's standing claims (:mod:`.standing`). The lock goes with the connection (a process
killed, a connection dropped), so a create never claims for a holder that is gone.

The listening connection also listens on the rail's grant channel when the tracker names one
(``grants``: the channel and what takes each of its payloads, :mod:`.standing`), through the
rail's ``bw_listen_grants``: the server derives the name, so no statement sent holds it (it
would show in ``pg_stat_activity`` and ``pg_stat_statements`` to a monitoring role): a create's
grant to a standing claim arrives there, with the create's own NOTIFY, in the same read of the
socket, and is handed over before the waiters are woken. The grant channel is listened on
before the rail's channel, so the session's last statement names the rail's.

Lease expiry needs no message: ``wait_for_work`` sleeps at most until the earliest live lease
lapses. While the listening connection is down (a server restart), :attr:`Listener.healthy` is
false and waiters fall back to a poll tick; it reconnects by itself with a capped back-off.
Losing it wakes the waiters at once (a NOTIFY may have been lost with it): each looks, and an
idle parked claim that relied on NOTIFYs alone goes back to claiming (:class:`~.idle.IdleLook`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio.from_thread
import anyio.lowlevel
import psycopg
from psycopg import sql

__all__ = ["Grants", "Listener", "channel_name", "holder_of"]

log = logging.getLogger("backlog_worker.tracker")

#: How long one wait on the listening socket lasts before the stop flag is looked at again.
_POLL_S = 0.5
_MAX_BACKOFF_S = 5.0

#: The rail's grant channel, what takes each of its payloads, and the rail's schema (whose
#: ``bw_listen_grants`` listens there: see the module docstring).
Grants = tuple[str, Callable[[str], None], str]


def channel_name(schema: str) -> str:
    """The NOTIFY channel of a rail (an identifier under PostgreSQL's 63-byte limit)."""
    return "backlog_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


def holder_of(channel: str, instance: str) -> tuple[int, int]:
    """The session advisory lock (two int4 keys: the rail's channel, the instance) an
    instance's listening connection holds while it listens (see the module docstring)."""
    a, b = (hashlib.sha256(part.encode()).digest()[:4] for part in (channel, instance))
    return int.from_bytes(a, "big", signed=True), int.from_bytes(b, "big", signed=True)


class Listener:
    """``LISTEN channel`` on a connection of its own, calling ``wake`` on the event loop per
    message of another instance, and ``grants``' taker per message on the grant channel (see
    the module docstring)."""

    def __init__(
        self,
        conninfo: str,
        channel: str,
        instance: str,
        wake: Callable[[], None],
        grants: Grants | None = None,
    ):
        self._conninfo = conninfo
        self._channel = channel
        self._grants = grants
        self._instance = instance
        self._wake = wake
        self._holder = holder_of(channel, instance)
        self._token = anyio.lowlevel.current_token()
        native = self._token.native_token
        #: The asyncio loop that reads the socket itself (None: the thread reads it).
        self._loop: asyncio.AbstractEventLoop | None = (
            native if isinstance(native, asyncio.AbstractEventLoop) else None
        )
        #: The connection the loop reads (set and cleared on the loop only).
        self._reading: psycopg.Connection[Any] | None = None
        self._fd = -1
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{channel}-listen", daemon=True)
        self._thread.start()

    @property
    def healthy(self) -> bool:
        """Whether the listening connection is up (else waiters poll)."""
        return self._listening.is_set()

    def wait_listening(self, timeout_s: float) -> bool:
        """Block until ``LISTEN`` is in place (a thread call; True if it is)."""
        return self._listening.wait(timeout_s)

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as conn:
                    # Not waiting for it: a lock still held by this instance's earlier
                    # connection (not yet gone at the server) makes its standing claims look
                    # gone, so creates leave them to the NOTIFY (see .standing).
                    conn.execute("SELECT pg_try_advisory_lock(%s::int4, %s::int4)", self._holder)
                    if self._grants is not None:  # the server names the channel
                        conn.execute(
                            sql.SQL("SELECT {}.bw_listen_grants(%s)").format(
                                sql.Identifier(self._grants[2])
                            ),
                            (self._grants[2],),
                        )
                    conn.execute(f'LISTEN "{self._channel}"')
                    backoff = 0.1
                    if self._loop is not None:
                        self._lost.clear()
                        self._loop.call_soon_threadsafe(self._attach, conn)
                        while not (self._stop.is_set() or self._lost.wait(_POLL_S)):
                            pass
                        if self._stop.is_set():
                            return
                        self._listening.set()  # it was up: say that it dropped (below)
                        raise psycopg.OperationalError("the listening connection was lost")
                    self._listening.set()
                    self._deliver(None)  # anything written while we were away
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=_POLL_S):
                            if self._grants is not None and note.channel == self._grants[0]:
                                self._deliver_grant(self._grants[1], note.payload)
                            else:
                                self._deliver(note.payload)
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                if self._listening.is_set():
                    self._listening.clear()
                    if self._loop is None:
                        self._deliver(None)  # a NOTIFY may be lost with it: waiters look
                    log.warning(
                        "the rail's wake-up connection dropped (%s); polling until it is back",
                        type(exc).__name__,
                        extra={"action": "listen_lost"},
                    )
            finally:
                self._listening.clear()
            self._stop.wait(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    # -- on the event loop (asyncio): the loop reads the socket --------------------------------
    def _attach(self, conn: psycopg.Connection[Any]) -> None:
        """Start reading ``conn``'s socket on the loop (called on the loop)."""
        if self._stop.is_set() or self._loop is None:
            return
        try:
            fd = conn.fileno()
            self._loop.add_reader(fd, self._readable)
        except (OSError, ValueError, psycopg.Error):
            self._lost.set()  # closed meanwhile: the thread connects again
            return
        self._reading, self._fd = conn, fd
        self._listening.set()
        self._wake_now()  # anything written while we were away

    def _readable(self) -> None:
        """The socket has data: read it and wake the waiters once per message of another
        instance; a failed read (the server went away) hands the connection back."""
        conn = self._reading
        if conn is None:
            return
        pgconn = conn.pgconn
        try:
            pgconn.consume_input()
            if pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the listening connection is closed")
            grants = self._grants
            while (note := pgconn.notifies()) is not None:
                if grants is not None and note.relname.decode() == grants[0]:
                    with contextlib.suppress(Exception):  # never in the way of the wake-ups
                        grants[1](note.extra.decode(errors="replace"))
                elif note.extra.decode() != self._instance:
                    self._wake_now()
        except psycopg.Error:
            self._detach()
            self._lost.set()
            self._wake_now()  # a NOTIFY may be lost with it: waiters look, then poll

    def _wake_now(self) -> None:
        if not self._stop.is_set():
            self._wake()

    def _detach(self) -> None:
        """Stop reading (on the loop, before the thread may close the connection)."""
        conn, self._reading = self._reading, None
        self._listening.clear()
        if conn is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)

    # -- on the thread (another event loop) ----------------------------------------------------
    def _deliver(self, payload: str | None) -> None:
        if payload == self._instance or self._stop.is_set():
            return
        with contextlib.suppress(Exception):  # the loop is gone: the tracker is closing
            anyio.from_thread.run_sync(self._wake, token=self._token)

    def _deliver_grant(self, take: Callable[[str], None], payload: str) -> None:
        if self._stop.is_set():
            return
        with contextlib.suppress(Exception):  # the loop is gone: the tracker is closing
            anyio.from_thread.run_sync(take, payload, token=self._token)

    def stop(self) -> Any:
        """Ask the thread to end (called on the event loop: the loop stops reading first);
        returns its ``join`` (to run on a worker thread)."""
        self._detach()
        self._stop.set()
        self._lost.set()  # the thread's wait on the loop's reading ends now, not a poll later
        return self._thread.join
