"""Run one subprocess under anyio without ever leaving an orphan behind.

Every subprocess executor goes through :func:`run_process`:

- ``argv`` is exec'd directly (never a shell), in its own session, so the child leads a fresh
  process group that holds it and everything it forks (the group's id is the child's pid);
- stdin is ``/dev/null`` unless bytes are given (then fed and closed); stdout and stderr are read
  concurrently and handed to callbacks chunk by chunk as they arrive, while a bounded copy is kept
  (the head of stdout, the tail of stderr);
- when the leader exits, any process still in its group is terminated (``SIGTERM``, then
  ``SIGKILL`` after ``term_grace_s``), so a grandchild can neither outlive the run nor hold the
  pipes open;
- on cancellation (timeout, lost lease, shutdown) the whole group gets the same treatment under a
  shielded scope, and only then does the cancellation propagate. When the caller set
  :data:`kill_deadline` (the worker does, to the lease's end), the grace is cut so that
  ``SIGKILL`` comes before it.

The group also dies when the worker is killed (``kill -9``, OOM killer): a small guard process
(:mod:`plugins.proc.guard`) sends ``SIGKILL`` to every registered group, and its session, once
the worker is gone; the child's program runs only once its group is registered (it waits at a
gate, :mod:`plugins.proc.gate`), so no instant is left in which a kill of the worker orphans it.
A descendant that leaves the session on purpose (``setsid``) escapes all of this; only a cgroup
holds it, which is the job of the service manager (see the systemd unit).

:func:`minimal_env` builds a child environment from scratch so tracker tokens never reach a child.

It may touch the child, its process group and pipes, the orphan guard (:mod:`plugins.proc.guard`)
and its gate (:mod:`plugins.proc.gate`), and the worker's environment (read, by
:func:`minimal_env`); it knows nothing of executors, the tracker or the worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal as signal_mod
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from plugins.proc.capture import HeadCapture, TailCapture, decode_output
from plugins.proc.env import SECRET_ENV_PATTERNS, is_secret_env_name, minimal_env, trace_env
from plugins.proc.gate import Gate
from plugins.proc.guard import (
    group_members,
    guard_ready,
    kill_deadline,
    register_group,
    unregister_group,
)
from plugins.proc.outcome import ProcessResult, SpawnError, spawn_error
from tracker_client.errors import ExecutorError

__all__ = [
    "SECRET_ENV_PATTERNS",
    "ProcessResult",
    "SpawnError",
    "decode_output",
    "is_secret_env_name",
    "kill_deadline",
    "minimal_env",
    "run_process",
    "trace_env",
]

logger = logging.getLogger("backlog_worker.executor.proc")

#: Seconds to wait for the pipes to reach EOF once the process group is gone.
_DRAIN_TIMEOUT_S = 5.0
#: Seconds to wait for the group to vanish after SIGKILL before giving up (and logging).
_KILL_WAIT_S = 5.0
_READ_CHUNK = 65_536

OutputCallback = Callable[[bytes], Awaitable[None]]


class _Pump:
    """State of one output pump: its shield, whether it waits for data, and when it ended."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope(shield=True)
        self.done = anyio.Event()
        self.receiving = False


class _Runner:
    """One process's pumps and its group-termination logic."""

    def __init__(
        self,
        process: Process,
        *,
        argv0: str,
        max_capture_bytes: int,
        term_grace_s: float,
    ) -> None:
        self.process = process
        self.kill_by = kill_deadline.get()  # the caller's context: the run this process serves
        self.pid = process.pid
        self.argv0 = argv0
        self.term_grace_s = term_grace_s
        self.stdout = HeadCapture(max_capture_bytes)
        self.stderr = TailCapture(max_capture_bytes)
        self.callback_error: BaseException | None = None
        self.callbacks_enabled = True
        self.wait_scope: anyio.CancelScope | None = None
        self._callback_scopes: set[anyio.CancelScope] = set()
        self._pumps: list[_Pump] = []
        self.feed_scope = anyio.CancelScope()

    async def pump(
        self,
        stream: ByteReceiveStream,
        capture: HeadCapture | TailCapture,
        callback: OutputCallback | None,
        state: _Pump,
    ) -> None:
        """Read ``stream`` to EOF. Shielded: it keeps draining while the group is terminated, so
        a child writing during its grace period never blocks on a full pipe."""
        try:
            with state.scope:
                while True:
                    state.receiving = True
                    try:
                        chunk = await stream.receive(_READ_CHUNK)
                    except (
                        anyio.EndOfStream,
                        anyio.ClosedResourceError,
                        anyio.BrokenResourceError,
                    ):
                        return
                    finally:
                        state.receiving = False
                    capture.feed(chunk)
                    if callback is not None and self.callbacks_enabled:
                        await self._call(callback, chunk)
        finally:
            state.done.set()

    def add_pump(self) -> _Pump:
        """Register a pump before it starts, so :meth:`drain` knows it even if it never ran."""
        state = _Pump()
        self._pumps.append(state)
        return state

    async def _call(self, callback: OutputCallback, chunk: bytes) -> None:
        with anyio.CancelScope() as scope:
            self._callback_scopes.add(scope)
            try:
                await callback(chunk)
            except Exception as exc:
                # a broken callback stops the run: record it, stop calling back, end the process
                if self.callback_error is None:
                    self.callback_error = exc
                self.callbacks_enabled = False
                if self.wait_scope is not None:
                    self.wait_scope.cancel()
            finally:
                self._callback_scopes.discard(scope)

    def stop_callbacks(self) -> None:
        """No more callbacks (the run is being cancelled): cancel the ones in flight."""
        self.callbacks_enabled = False
        for scope in list(self._callback_scopes):
            scope.cancel()

    async def close_streams(self) -> None:
        """Close our ends of the pipes (the process itself is already reaped or abandoned)."""
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(anyio.BrokenResourceError, OSError):
                    await stream.aclose()
        # anyio's stream wrappers do not close asyncio's pipe transports; a pipe an escaped
        # descendant still holds would otherwise stay open until GC (ResourceWarning)
        inner = getattr(self.process, "_process", None)
        transport = getattr(inner, "_transport", None)
        if transport is not None:
            # stdin may still be "closing" with unsent data nobody will read: drop it now
            stdin_pipe = transport.get_pipe_transport(0)
            if stdin_pipe is not None and stdin_pipe.get_write_buffer_size() > 0:
                stdin_pipe.abort()
            transport.close()

    async def feed(self, stream: ByteSendStream, data: bytes) -> None:
        """Write ``data`` to the child's stdin, then close it. A child that quits early is fine.

        Cancelled by :meth:`drain` if still blocked once the group is gone (an escaped descendant
        holding stdin without reading it)."""
        try:
            with self.feed_scope:
                if data:
                    await stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(anyio.BrokenResourceError, OSError):
                    await stream.aclose()

    async def _members(self) -> list[int]:
        # the common case (group already empty) is one cheap syscall, no thread hop
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return await anyio.to_thread.run_sync(group_members, self.pid, self.pid)

    async def _wait_group_gone(self, limit_s: float) -> bool:
        """Poll until the group is empty; True if it is, False after ``limit_s``."""
        deadline = anyio.current_time() + limit_s
        delay = 0.01
        while await self._members():
            if anyio.current_time() >= deadline:
                return False
            await anyio.sleep(min(delay, max(0.0, deadline - anyio.current_time())))
            delay = min(delay * 2, 0.1)
        return True

    def _killpg(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def terminate_group(self) -> None:
        """SIGTERM the group, SIGKILL after the grace, wait for it to vanish. Call shielded."""
        if not await self._members():
            return
        grace = self.term_grace_s
        if self.kill_by is not None:  # past the lease's end the task may be someone else's
            grace = min(grace, max(0.0, self.kill_by() - anyio.current_time()))
        self._killpg(signal_mod.SIGTERM)
        if await self._wait_group_gone(grace):
            return
        logger.info(
            "process group %d still alive %.1fs after SIGTERM: sending SIGKILL%s",
            self.pid,
            grace,
            "" if grace == self.term_grace_s else " (the lease ends)",
            extra={"action": "process_killed", "pid": self.pid},
        )
        self._killpg(signal_mod.SIGKILL)
        if not await self._wait_group_gone(_KILL_WAIT_S):
            logger.error(
                "process group %d of %r survived SIGKILL for %.0fs",
                self.pid,
                self.argv0,
                _KILL_WAIT_S,
                extra={"action": "process_kill_failed", "pid": self.pid},
            )

    async def drain(self) -> None:
        """Let the pumps reach EOF once the group is gone.

        A pump still waiting for data after :data:`_DRAIN_TIMEOUT_S` reads a pipe held open by a
        descendant that left the group: it is abandoned. A pump busy in a (slow) callback is
        waited for, since it is making progress.
        """
        self.feed_scope.cancel()
        while True:
            with anyio.move_on_after(_DRAIN_TIMEOUT_S):
                for pump in self._pumps:
                    await pump.done.wait()
                return
            stuck = [p for p in self._pumps if p.receiving and not p.done.is_set()]
            if stuck:
                logger.warning(
                    "output of %r still open after its process group ended (a descendant left "
                    "the group?); no longer reading it",
                    self.argv0,
                    extra={"action": "process_pipe_abandoned", "pid": self.pid},
                )
                for pump in stuck:
                    pump.scope.cancel()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes | None = None,
    on_stdout: OutputCallback | None = None,
    on_stderr: OutputCallback | None = None,
    max_capture_bytes: int = 1 << 20,
    term_grace_s: float = 5.0,
) -> ProcessResult:
    """Run ``argv`` to completion and return how it ended (see the module docstring).

    Raises :class:`SpawnError` (an :class:`~tracker_client.errors.ExecutorError`) when the program
    cannot be started: missing, not executable, argument list too large, NUL in an argument,
    missing ``cwd``. An exception raised by a callback ends the process group and is re-raised
    once it is gone. On cancellation the group is terminated first, then the cancellation
    propagates.
    """
    args = [os.fsdecode(a) for a in argv]
    if not args or not args[0]:
        raise SpawnError("cannot start a process: empty argv", reason="bad_argument")
    for index, arg in enumerate(args):
        if "\0" in arg:
            raise SpawnError(
                f"cannot start {args[0]!r}: argument {index} contains a NUL byte",
                reason="bad_argument",
            )
    if max_capture_bytes < 0:
        raise ValueError("max_capture_bytes must be >= 0")
    started = time.monotonic()
    # A guarded child waits at the gate until its group is registered (plugins.proc.gate).
    gate = Gate() if guard_ready() else None
    try:
        return await _run_gated(
            args,
            gate,
            cwd=cwd,
            env=env,
            stdin=stdin,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            max_capture_bytes=max_capture_bytes,
            term_grace_s=term_grace_s,
            started=started,
        )
    finally:
        if gate is not None:
            gate.close()


async def _run_gated(
    args: list[str],
    gate: Gate | None,
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes | None,
    on_stdout: OutputCallback | None,
    on_stderr: OutputCallback | None,
    max_capture_bytes: int,
    term_grace_s: float,
    started: float,
) -> ProcessResult:
    # shielded: a cancel arriving mid-spawn must not leave a started child unsupervised
    with anyio.CancelScope(shield=True):
        try:
            process = await anyio.open_process(
                args if gate is None else gate.argv(args, env),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                pass_fds=() if gate is None else gate.child_fds,
            )
        except OSError as exc:
            raise spawn_error(args, cwd, exc) from exc
        except ValueError as exc:  # e.g. NUL in an environment value
            raise SpawnError(f"cannot start {args[0]!r}: {exc}", reason="bad_argument") from exc
        if gate is not None:
            gate.spawned()
        register_group(process.pid)  # from now on it dies with this process, even by kill -9
        if gate is not None:
            gate.open()  # only now may the program run: the guard knows its group
    runner = _Runner(
        process, argv0=args[0], max_capture_bytes=max_capture_bytes, term_grace_s=term_grace_s
    )
    logger.debug("started %r as pid %d", args[0], process.pid, extra={"action": "process_started"})
    try:
        async with anyio.create_task_group() as tg:
            assert process.stdout is not None
            assert process.stderr is not None
            for stream, capture, callback in (
                (process.stdout, runner.stdout, on_stdout),
                (process.stderr, runner.stderr, on_stderr),
            ):
                tg.start_soon(runner.pump, stream, capture, callback, runner.add_pump())
            if stdin is not None:
                assert process.stdin is not None
                tg.start_soon(runner.feed, process.stdin, stdin)
            try:
                with anyio.CancelScope() as wait_scope:
                    runner.wait_scope = wait_scope
                    await process.wait()
            except BaseException:
                runner.stop_callbacks()
                raise
            finally:
                if runner.callback_error is not None:
                    runner.stop_callbacks()
                with anyio.CancelScope(shield=True):
                    # leader gone or cancelled: nothing of its group may outlive the run
                    await runner.terminate_group()
                    with anyio.move_on_after(_KILL_WAIT_S):
                        await process.wait()
                    await runner.drain()
    finally:
        unregister_group(process.pid)  # the group is gone (or beyond SIGKILL): pids are reused
        with anyio.CancelScope(shield=True):
            await runner.close_streams()
    if runner.callback_error is not None:
        raise runner.callback_error
    failed = None if gate is None else gate.exec_error(args[0])
    if failed is not None:  # the trampoline could not exec the program: as a direct spawn says
        raise spawn_error(args, cwd, failed) from failed
    rc = process.returncode
    if rc is None:  # not even SIGKILL ended it (uninterruptible sleep): say so, don't hang
        raise ExecutorError(f"process {process.pid} ({args[0]!r}) did not exit after SIGKILL")
    return ProcessResult(
        returncode=rc,
        signal=-rc if rc < 0 else None,
        stdout=runner.stdout.value(),
        stderr=runner.stderr.value(),
        stdout_truncated=runner.stdout.truncated,
        stderr_truncated=runner.stderr.truncated,
        pid=process.pid,
        duration_s=time.monotonic() - started,
    )
