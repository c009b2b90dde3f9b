"""Plain ``def`` functions for the ``python`` executor: run in a thread, with a blocking context.

A sync function gets a :class:`ThreadContext` instead of the async
:class:`~plugins.api.ExecutionContext`: the same task, run, options and working directory, and
blocking ``report``/``flush``/``artifact``/``artifact_file`` (and the agent calls: ``store``,
``spawn``, ``checkpoint``, ``read_upstream``) that run the async methods on the worker's event
loop (``anyio.from_thread.run``), so it never blocks the loop and never touches it from the
wrong thread.

A thread cannot be interrupted. When the run is cancelled (lease lost, timeout, shutdown past
its grace) the run ends at once as it would for an async function; the thread is abandoned:
``ctx.cancelled`` becomes True (``ctx.cancel_event`` is set, so ``ctx.cancel_event.wait(s)``
doubles as an interruptible sleep), every later context call raises :class:`RunCancelled`, and
whatever the function returns is discarded. A function that never looks keeps running in the
background (a daemon thread: it does not hold the worker's exit) until it returns. Such threads
are counted per executor (:class:`AbandonedThreads`): past the role's ``max_abandoned_threads``
the worker claims nothing more for the role until some of them return, so a function that hangs
for ever leaks a bounded number of threads, not one per run.

It may touch the run's :class:`~plugins.api.ExecutionContext` (through the worker's event loop) and
one daemon thread per call; nothing of the tracker or the worker.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

from plugins.api import ExecutionContext
from tracker_client.agent_models import Upstream
from tracker_client.models import Run, StoreEntry, Task

__all__ = ["AbandonedThreads", "RunCancelled", "ThreadContext", "run_in_thread"]

log = logging.getLogger("backlog_worker.executor.python")
T = TypeVar("T")
_Entries = list[StoreEntry]  # ThreadStore.list shadows the builtin in its class body

#: How long a cancelled run waits for the context calls its thread has in flight to unwind.
_UNWIND_S = 5.0


class AbandonedThreads:
    """The threads of one executor's cancelled runs that are still running (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    def add(self, thread: threading.Thread) -> None:
        """``thread`` was abandoned by its cancelled run."""
        with self._lock:
            self._threads.add(thread)

    def count(self) -> int:
        """How many are still running (those that returned are forgotten)."""
        with self._lock:
            self._threads = {t for t in self._threads if t.is_alive()}
            return len(self._threads)


class RunCancelled(Exception):
    """Raised by a :class:`ThreadContext` call once its run was cancelled or has ended."""


class ThreadContext:
    """What a plain ``def`` function gets: the run's context, with blocking methods.

    Attributes as on :class:`~plugins.api.ExecutionContext`: ``task``, ``run``, ``attempt``,
    ``options``, ``instructions``, ``logger``, ``deadline``, ``traceparent``; plus ``cancel_event``
    (a :class:`threading.Event`, set when the run is cancelled) for cooperative stopping.
    """

    def __init__(self, ctx: ExecutionContext) -> None:
        """Wrap ``ctx``; built on the event loop's thread, used from the function's thread."""
        self._ctx = ctx
        self.task: Task = ctx.task
        self.run: Run = ctx.run
        self.attempt: int = ctx.attempt
        self.options: Mapping[str, Any] = ctx.options
        self.instructions: str | None = ctx.instructions
        self.logger = ctx.logger
        self.deadline: float | None = ctx.deadline
        self.traceparent: str | None = ctx.traceparent
        self.previous_checkpoint: Any = ctx.previous_checkpoint
        self.upstream: list[Upstream] = list(ctx.upstream)
        #: The rail's store, blocking (``get``/``put``/``delete``/``list``/``search``).
        self.store = ThreadStore(self)
        self.cancel_event = threading.Event()
        self._token = anyio.lowlevel.current_token()
        # the loop's clock (anyio.current_time) as seen from time.monotonic, for time_remaining
        self._clock_offset = anyio.current_time() - time.monotonic()
        # loop-side state (only touched on the loop's thread, so no lock)
        self._closed = False
        self._scopes: set[anyio.CancelScope] = set()
        self._idle: anyio.Event | None = None

    # -- state (callable from the function's thread) -------------------------------------------
    @property
    def cancelled(self) -> bool:
        """True once the run was cancelled: return soon; nothing it returns is used."""
        return self.cancel_event.is_set()

    @property
    def shutting_down(self) -> bool:
        """True once the worker started draining: finish soon or checkpoint."""
        return self._ctx.shutting_down

    @property
    def workdir(self) -> Path:
        """This run's working directory (created on first access)."""
        self._check()
        return self._ctx.workdir

    def time_remaining(self) -> float | None:
        """Seconds until the deadline (never negative), or None without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - (time.monotonic() + self._clock_offset))

    # -- blocking versions of the context's methods ---------------------------------------------
    def report(self, kind: str, data: Any = None, *, flush: bool = False) -> None:
        """:meth:`ExecutionContext.report`, blocking this thread until it is buffered/written."""
        self._call(lambda: self._ctx.report(kind, data, flush=flush))

    def flush(self) -> None:
        """:meth:`ExecutionContext.flush`, blocking."""
        self._call(self._ctx.flush)

    def report_cost(self, *, usd: float = 0.0, tokens: int = 0) -> None:
        """:meth:`ExecutionContext.report_cost` (it only adds up figures: nothing to wait for)."""
        self._check()
        self._ctx.report_cost(usd=usd, tokens=tokens)

    def artifact(
        self,
        kind: str,
        uri: str,
        *,
        sha256: str | None = None,
        size_bytes: int | None = None,
        meta: Any = None,
    ) -> str:
        """:meth:`ExecutionContext.artifact`, blocking; the artifact's id."""
        return self._call(
            lambda: self._ctx.artifact(kind, uri, sha256=sha256, size_bytes=size_bytes, meta=meta)
        )

    def artifact_file(
        self,
        path: Path | str,
        *,
        kind: str = "file",
        meta: Any = None,
        copy_to: Path | str | None = None,
    ) -> str:
        """:meth:`ExecutionContext.artifact_file`, blocking; the artifact's id."""
        return self._call(
            lambda: self._ctx.artifact_file(path, kind=kind, meta=meta, copy_to=copy_to)
        )

    def spawn(self, pipeline: str, title: str, **fields: Any) -> str:
        """:meth:`ExecutionContext.spawn`, blocking; the subtask's id."""
        return self._call(lambda: self._ctx.spawn(pipeline, title, **fields))

    def checkpoint(self, data: Any) -> None:
        """:meth:`ExecutionContext.checkpoint`, blocking (the check; the write is paced)."""
        self._call(lambda: self._ctx.checkpoint(data))

    def read_upstream(self) -> list[Upstream]:
        """:meth:`ExecutionContext.read_upstream`, blocking."""
        self.upstream = self._call(self._ctx.read_upstream)
        return self.upstream

    def _check(self) -> None:
        if self.cancel_event.is_set():
            raise RunCancelled(f"run {self.run.id} was cancelled; its context is closed")

    def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        self._check()
        return anyio.from_thread.run(self._guarded, make, token=self._token)

    async def _guarded(self, make: Callable[[], Awaitable[T]]) -> T:
        # On the loop: refused once closed; otherwise cancellable by close(), so nothing the
        # abandoned thread started is still writing after the run has ended.
        if self._closed:
            raise RunCancelled(f"run {self.run.id} has ended; its context is closed")
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                return await make()
            finally:
                self._scopes.discard(scope)
                if self._closed and not self._scopes and self._idle is not None:
                    self._idle.set()
        raise RunCancelled(f"run {self.run.id} was cancelled while writing")

    async def close(self) -> None:
        """The run ended (on the loop): refuse later calls, cancel and await those in flight."""
        self._closed = True
        self.cancel_event.set()
        if not self._scopes:
            return
        self._idle = anyio.Event()
        for scope in self._scopes:
            scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_UNWIND_S):
            await self._idle.wait()


class ThreadStore:
    """``ctx.store`` for a plain ``def``: :class:`plugins.agent.Store`'s calls, blocking."""

    def __init__(self, tctx: ThreadContext) -> None:
        self._tctx = tctx

    def get(self, namespace: str, key: str) -> Any:
        """The value, or None when absent."""
        store = self._tctx._ctx.store
        return self._tctx._call(lambda: store.get(namespace, key))

    def put(self, namespace: str, key: str, value: Any) -> None:
        """Store a JSON value (ValueError otherwise, nothing written)."""
        store = self._tctx._ctx.store
        self._tctx._call(lambda: store.put(namespace, key, value))

    def delete(self, namespace: str, key: str) -> None:
        """Delete a key."""
        store = self._tctx._ctx.store
        self._tctx._call(lambda: store.delete(namespace, key))

    def list(self, namespace: str) -> _Entries:
        """Every entry of the namespace, sorted by key."""
        store = self._tctx._ctx.store
        return self._tctx._call(lambda: store.list(namespace))

    def search(self, query: str, *, namespace: str | None = None, limit: int = 10) -> _Entries:
        """Full-text search, best first."""
        store = self._tctx._ctx.store
        return self._tctx._call(lambda: store.search(query, namespace=namespace, limit=limit))


async def run_in_thread(
    function: Callable[[ThreadContext], Any],
    tctx: ThreadContext,
    name: str,
    abandoned_threads: AbandonedThreads | None = None,
) -> Any:
    """Call ``function(tctx)`` in a new daemon thread and return what it returns.

    Cancellation does not wait for the thread: ``tctx`` is closed (its ``cancel_event`` set) and
    the cancellation propagates; the thread is abandoned (counted in ``abandoned_threads`` while
    it runs) and its result discarded. An exception
    the function raises is re-raised here (a ``BaseException`` such as SystemExit becomes a
    RuntimeError: a task must not stop the worker).
    """
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    result: list[Any] = []
    error: list[BaseException] = []
    abandoned = threading.Event()
    context = contextvars.copy_context()  # the run's log context follows it into the thread

    def target() -> None:
        started = time.monotonic()
        try:
            result.append(context.run(function, tctx))
        except BaseException as exc:
            error.append(exc)
        finally:
            if abandoned.is_set():
                log.info(
                    "python function %s of cancelled run %s returned after %.1fs",
                    name,
                    tctx.run.id,
                    time.monotonic() - started,
                    extra={"action": "python_thread_finished", "run_id": tctx.run.id},
                )
            with contextlib.suppress(Exception):  # the loop has ended: nobody is waiting
                anyio.from_thread.run_sync(done.set, token=token)

    thread = threading.Thread(target=target, name=f"python executor {name}", daemon=True)
    thread.start()
    try:
        await done.wait()
    except BaseException:
        abandoned.set()
        if thread.is_alive():
            if abandoned_threads is not None:
                abandoned_threads.add(thread)
            log.warning(
                "python function %s is still running after its run %s was cancelled: the "
                "thread is abandoned (it should return once ctx.cancelled is True)",
                name,
                tctx.run.id,
                extra={"action": "python_thread_abandoned", "run_id": tctx.run.id},
            )
        raise
    finally:
        await tctx.close()
    if error:
        exc = error[0]
        if isinstance(exc, Exception):
            raise exc
        raise RuntimeError(f"{name} raised {type(exc).__name__}: {exc}") from exc
    return result[0]
