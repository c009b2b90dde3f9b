"""A one-shot wake-up for one waiting task: what :class:`anyio.Event` does for the worker's
per-run hand-offs, at a fraction of its cost on asyncio.

Each run is handed to a parked task (:mod:`worker.daemon.runners`) and most runs' final reports
wait for their batch's answer (:mod:`worker.lease.batch`): two wake-ups per run. On asyncio an
:class:`anyio.Event` is built twice over (anyio looks its backend up and then initialises the
backend's event a second time: two ``asyncio.Event`` objects), and its ``wait`` adds two
coroutine frames that every resumption of the waiting task's whole await chain passes through.
:class:`Wake` is one asyncio future, awaited directly; under another backend (trio) it is an
:class:`anyio.Event`. It is set at most once and awaited by one task; a waiter cancelled while
waiting gets the cancellation as it would from an event, and a later :meth:`Wake.set` is a no-op.

It touches the running event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import anyio

__all__ = ["Wake", "running_loop"]


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, to make many :class:`Wake` in (None under another backend)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Wake:
    """Set once by anyone, awaited by one task (see the module docstring)."""

    __slots__ = ("_event", "_fut")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Made in the task's event loop (it binds to it). ``loop``: that loop, when the
        caller holds it (:func:`running_loop`; finding it is a system call on CPython 3.11,
        its fork check); None: looked up."""
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not asyncio (trio): anyio's event
                self._fut: asyncio.Future[None] | None = None
                self._event: anyio.Event | None = anyio.Event()
                return
        self._fut = loop.create_future()
        self._event = None

    def set(self) -> None:
        """Wake the waiter (now, or at once when it waits); a no-op when already set or when
        the waiter was cancelled."""
        fut = self._fut
        if fut is None:
            assert self._event is not None
            self._event.set()
        elif not fut.done():
            fut.set_result(None)

    def is_set(self) -> bool:
        """Whether :meth:`set` was called (or the waiter was cancelled)."""
        if self._fut is None:
            assert self._event is not None
            return self._event.is_set()
        return self._fut.done()

    def wait(self) -> Awaitable[None]:
        """What to await until :meth:`set` (the future itself on asyncio: no frame of its own)."""
        if self._fut is None:
            assert self._event is not None
            return self._event.wait()
        return self._fut
