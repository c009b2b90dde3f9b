"""Forwarding a run's streaming output as batched ``progress`` events.

The pipe readers call :meth:`ProgressForwarder.feed` for every chunk; it only decodes and
buffers (never awaits the tracker), so a slow tracker can never stall the pipes. A flusher
task sends what is buffered every ``progress_interval_s`` or as soon as one stream holds
``progress_chunk_bytes``, as ``progress`` events ``{"stream": "stdout"|"stderr", "text": ...}``.
After ``progress_max_bytes`` of text in total, one last event says the rest is dropped, so a
chatty agent costs a bounded number of tracker writes. The last few KiB of each stream are kept
regardless (:meth:`tail`) for failure details.

It may touch the run's context (``progress`` events through ``ctx.report``) and the redactor only:
no process, no file.
"""

from __future__ import annotations

import codecs
import logging

import anyio
import anyio.abc

from plugins.api import ExecutionContext
from plugins.nullclaw.usage import TokenCount
from plugins.proc.redact import Redactor

__all__ = ["ProgressForwarder"]

_TAIL_CHARS = 4096
log = logging.getLogger("backlog_worker.executor.nullclaw")


class _Stream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending: list[str] = []
        self.pending_chars = 0
        self.tail = ""

    def take(self) -> str:
        text = "".join(self.pending)
        self.pending.clear()
        self.pending_chars = 0
        return text


class ProgressForwarder:
    """Decodes, buffers and periodically reports a process's output (see module docstring)."""

    def __init__(
        self,
        ctx: ExecutionContext,
        *,
        interval_s: float,
        chunk_chars: int,
        max_chars: int,
        forward_stderr: bool,
        redactor: Redactor | None = None,
    ) -> None:
        self._ctx = ctx
        self._interval_s = interval_s
        self._chunk_chars = chunk_chars
        self._budget = max_chars
        self._max_chars = max_chars
        self._forward_stderr = forward_stderr
        self._redactor = redactor or Redactor(())
        self._streams = {"stdout": _Stream("stdout"), "stderr": _Stream("stderr")}
        self._wake = anyio.Event()
        self._capped = False
        self.events_sent = 0
        #: The model's token usage as nullclaw logs it on stderr (docs/operate/budgets.md).
        self.tokens = TokenCount()

    async def on_stdout(self, chunk: bytes) -> None:
        """Pipe callback for stdout."""
        self._feed("stdout", chunk)

    async def on_stderr(self, chunk: bytes) -> None:
        """Pipe callback for stderr."""
        self._feed("stderr", chunk)

    def _feed(self, name: str, chunk: bytes, *, final: bool = False) -> None:
        stream = self._streams[name]
        text = stream.decoder.decode(chunk, final)
        if not text:
            return
        stream.tail = (stream.tail + text)[-_TAIL_CHARS:]
        if name == "stderr":
            self.tokens.feed(text)
            if not self._forward_stderr:
                return
        stream.pending.append(text)
        stream.pending_chars += len(text)
        if stream.pending_chars >= self._chunk_chars:
            self._wake.set()

    def tail(self, name: str) -> str:
        """The last few KiB of one stream as decoded so far (secrets redacted)."""
        return self._redactor.text(self._streams[name].tail)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Flush every interval or when a buffer fills; runs until cancelled."""
        task_status.started()
        while True:
            with anyio.move_on_after(self._interval_s):
                await self._wake.wait()
            self._wake = anyio.Event()
            await self.flush_quietly()

    async def flush_quietly(self, *, final: bool = False) -> None:
        """:meth:`flush`, but a tracker error only logs: progress is best effort.

        (A lost lease is noticed by the heartbeat, which cancels the run.)
        """
        try:
            await self.flush(final=final)
        except Exception as exc:
            log.warning(
                "could not report progress: %s",
                exc,
                extra={
                    "action": "progress_report_failed",
                    "task_id": self._ctx.task.id,
                    "run_id": self._ctx.run.id,
                },
            )

    async def flush(self, *, final: bool = False) -> None:
        """Report what is buffered now (``final`` also flushes the decoders' partial bytes)."""
        if final:
            for name in self._streams:
                self._feed(name, b"", final=True)
        for stream in self._streams.values():
            text = self._redactor.text(stream.take())
            if self._redactor and not final:
                # hold back what could be the beginning of a secret until the next flush
                keep = min(self._redactor.holdback, len(text))
                if keep:
                    stream.pending.append(text[-keep:])
                    stream.pending_chars = keep
                    text = text[:-keep]
            if not text or self._capped or self._max_chars == 0:
                continue
            if len(text) > self._budget:
                text = text[: self._budget]
                self._capped = True
            self._budget -= len(text)
            for start in range(0, len(text), self._chunk_chars):
                await self._emit(
                    {"stream": stream.name, "text": text[start : start + self._chunk_chars]}
                )
            if self._capped:
                await self._emit(
                    {
                        "stream": stream.name,
                        "dropped": True,
                        "note": f"progress output limit ({self._max_chars} characters) reached; "
                        "the rest is not forwarded (the answer artifact holds the result)",
                    }
                )
        if final:
            await self._ctx.flush()

    async def _emit(self, data: dict[str, object]) -> None:
        self.events_sent += 1
        await self._ctx.report("progress", data)
