"""One send per answer: the writes of ``tracker serve``'s connections, gathered.

uvicorn writes an answer to the transport in two or three pieces: the status line and headers
when the ASGI app sends ``http.response.start``, then the body (and, for h11, an empty end of
message). Each write is a ``send()`` at once, so each answer cost two system calls and two TCP
segments, and woke the client twice (its HTTP parser then reads headers and body separately).
A profile of the served tracker showed the headers' write as its largest single cost per
request. :class:`CoalescingTransport` keeps the pieces written in one turn of the event loop and
sends them together: at the end of the answer (the protocol calls :meth:`flush`), on close, or
at the next turn of the loop for an answer that is still streaming (nothing waits for a flush
more than one turn).

It may touch the transport it wraps and the event loop's ``call_soon``; never what is written.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CoalescingTransport"]


class CoalescingTransport:
    """A transport whose writes within one turn of the loop go out as one ``write``.

    Everything but ``write``, ``close``, ``abort`` and ``get_write_buffer_size`` is the wrapped
    transport's own (``is_closing``, ``get_extra_info``, reading and writing flow control).
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes) -> None:
        """Keep ``data`` for the next flush (this answer's end, or the next turn of the loop)."""
        if not data:
            return
        self._pending.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def flush(self) -> None:
        """Send what was written, in one write."""
        pending = self._pending
        if pending:
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            self._transport.write(data)

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def get_write_buffer_size(self) -> int:
        """Bytes not yet sent: the transport's buffer plus what waits for the flush."""
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def close(self) -> None:
        """Send what was written, then close (as ``Transport.close``: buffered data goes out)."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping what was not sent (as ``Transport.abort``)."""
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
