"""Wake-ups across hosts: ``LISTEN/NOTIFY`` on the rail's channel.

A write that may make work claimable or revoke a lease (the embedded rail's waking set: not
claims, heartbeats, events, artifacts, the store, an idle maintenance pass) sends
``pg_notify(channel, instance)`` inside its transaction, so the notification leaves at commit and
never for a rolled-back write. Each tracker instance with waiters keeps one listening connection
on a thread of its own (:class:`Listener`); a notification of another instance wakes this
instance's waiters on their event loop. Its own notifications are ignored: the write already
woke them in process.

Lease expiry needs no message: ``wait_for_work`` sleeps at most until the earliest live lease
lapses. While the listening connection is down (a server restart), :attr:`Listener.healthy` is
false and waiters fall back to a poll tick; it reconnects by itself with a capped back-off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio.from_thread
import anyio.lowlevel
import psycopg

__all__ = ["Listener", "channel_name"]

log = logging.getLogger("backlog_worker.tracker")

#: How long one wait on the listening socket lasts before the stop flag is looked at again.
_POLL_S = 0.5
_MAX_BACKOFF_S = 5.0


def channel_name(schema: str) -> str:
    """The NOTIFY channel of a rail (an identifier under PostgreSQL's 63-byte limit)."""
    return "backlog_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


class Listener:
    """A thread holding ``LISTEN channel`` that calls ``wake`` on the event loop per message."""

    def __init__(self, conninfo: str, channel: str, instance: str, wake: Callable[[], None]):
        self._conninfo = conninfo
        self._channel = channel
        self._instance = instance
        self._wake = wake
        self._token = anyio.lowlevel.current_token()
        self._stop = threading.Event()
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
                    conn.execute(f'LISTEN "{self._channel}"')
                    self._listening.set()
                    backoff = 0.1
                    self._deliver(None)  # anything written while we were away
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=_POLL_S):
                            self._deliver(note.payload)
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                if self._listening.is_set():
                    log.warning(
                        "the rail's wake-up connection dropped (%s); polling until it is back",
                        type(exc).__name__,
                        extra={"action": "listen_lost"},
                    )
            finally:
                self._listening.clear()
            self._stop.wait(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _deliver(self, payload: str | None) -> None:
        if payload == self._instance or self._stop.is_set():
            return
        with contextlib.suppress(Exception):  # the loop is gone: the tracker is closing
            anyio.from_thread.run_sync(self._wake, token=self._token)

    def stop(self) -> Any:
        """Ask the thread to end; returns its ``join`` (to run on a worker thread)."""
        self._stop.set()
        return self._thread.join
