"""A command's output stream: a bounded tail, and live ``output`` events up to a limit.

Split from :mod:`plugins.command.executor`.

It may touch the run's context (``output`` events through ``ctx.report``) only: no process, no file.
"""

from __future__ import annotations

import codecs
from typing import Any

from plugins.api import ExecutionContext
from plugins.proc.process import decode_output

__all__ = ["HOLDBACK_CHARS", "OutputStream"]


#: Characters of a trailing partial line held back from a live "output" event until the next
#: chunk (or the end): a secret split across two pipe reads then still arrives in one piece, so
#: the worker's scrubbing of what it writes to the tracker catches it. Complete lines (``\n`` or
#: ``\r``) are never held.
HOLDBACK_CHARS = 256


class OutputStream:
    """One output stream: a bounded tail, and live "output" events up to a limit."""

    def __init__(
        self, name: str, ctx: ExecutionContext, tail_bytes: int, stream: bool, limit_bytes: int
    ) -> None:
        """``name`` (stdout/stderr) of a run's ``ctx``: keep ``tail_bytes``, stream (if
        ``stream``) up to ``limit_bytes`` as events."""
        self.name = name
        self.ctx = ctx
        self.tail = bytearray()
        self.total = 0
        self._tail_bytes = tail_bytes
        self._stream = stream
        self._left = limit_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""

    async def __call__(self, chunk: bytes) -> None:
        """Take one chunk read from the pipe."""
        self.total += len(chunk)
        self.tail += chunk
        if len(self.tail) > 2 * self._tail_bytes:
            del self.tail[: len(self.tail) - self._tail_bytes]
        if not self._stream or self._left <= 0:
            return
        piece = chunk[: self._left]
        self._left -= len(piece)
        text = self._held + self._decoder.decode(piece)
        self._held = ""
        if self._left > 0:
            cut = max(text.rfind("\n"), text.rfind("\r")) + 1
            cut = max(cut, len(text) - HOLDBACK_CHARS)
            text, self._held = text[:cut], text[cut:]
            if text:
                await self.ctx.report("output", {"stream": self.name, "text": text})
            return
        data: dict[str, Any] = {"stream": self.name, "text": text}
        data["note"] = "stream limit reached; the rest is only in the final tail"
        await self.ctx.report("output", data)

    async def finish(self) -> None:
        """The stream ended: report the partial line still held back."""
        text, self._held = self._held + self._decoder.decode(b"", final=True), ""
        if text and self._stream:
            await self.ctx.report("output", {"stream": self.name, "text": text})

    def tail_text(self) -> str:
        """The last ``tail_bytes`` of the stream, decoded."""
        data = bytes(self.tail[-self._tail_bytes :]) if self._tail_bytes else b""
        return decode_output(data)
