"""Bounded capture of process output: the head of one stream, the tail of another.

Pure: no I/O, and it imports nothing of the project.
"""

from __future__ import annotations

__all__ = ["HeadCapture", "TailCapture", "decode_output"]


def decode_output(data: bytes) -> str:
    """Decode process output for humans: UTF-8, undecodable bytes replaced, never raising."""
    return data.decode("utf-8", errors="replace")


class HeadCapture:
    """Keeps the first ``limit`` bytes and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk``, keeping what fits under the limit."""
        self.total += len(chunk)
        room = self.limit - len(self.buf)
        if room > 0:
            self.buf += chunk[:room]

    @property
    def truncated(self) -> bool:
        """True when bytes were not kept."""
        return self.total > len(self.buf)

    def value(self) -> bytes:
        """The kept bytes, with a marker saying how many were cut when some were."""
        if not self.truncated:
            return bytes(self.buf)
        cut = self.total - len(self.buf)
        return bytes(self.buf) + f"\n[... {cut} more bytes not captured ...]\n".encode()


class TailCapture:
    """Keeps the last ``limit`` bytes and counts what fell off the front."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        """Account for ``chunk``, keeping the newest bytes."""
        self.total += len(chunk)
        self.buf += chunk
        # trim lazily (amortised O(1) per byte) and exactly in value()
        if len(self.buf) > 2 * self.limit:
            del self.buf[: len(self.buf) - self.limit]

    @property
    def truncated(self) -> bool:
        """True when bytes were not kept."""
        return self.total > self.limit

    def value(self) -> bytes:
        """The kept bytes, with a marker saying how many were cut when some were."""
        tail = bytes(self.buf[-self.limit :]) if self.limit > 0 else b""
        if not self.truncated:
            return bytes(self.buf)
        cut = self.total - len(tail)
        return f"[... {cut} earlier bytes not captured ...]\n".encode() + tail
