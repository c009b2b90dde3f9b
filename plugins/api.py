"""The executor plugin surface: :class:`Executor`, :class:`ExecutionContext` and outcomes.

An executor is any object with ``async def execute(ctx) -> Outcome``. A plugin registers a
*factory* (usually the class itself) under the entry-point group ``backlog_worker.executors``;
the worker calls it with the role's options mapping and calls ``execute`` once per claimed task.

Cancellation arrives as anyio cancellation (lease lost, timeout, shutdown past its grace); an
executor that owns subprocesses must kill their whole process group before re-raising.
An executor may also implement ``async def readiness(self) -> list[str]`` (one line per problem,
empty when ready); ``backlog-worker check`` runs it before any task is claimed. One that can tell
which triggers it may send (a command's ``exit_codes``) implements ``def triggers(self) ->
list[NamedTrigger]`` (:class:`SupportsTriggers`), and ``check`` holds them against the pipelines.

It may touch the run's working directory and the :class:`ContextSink` only through the
run's :class:`~plugins.context_hooks.ContextHooks`, which the runner (the worker, or
:class:`plugins.testing.ExecutorHarness`) builds and keeps: the report buffer, the directory
(created on first use, and held by a lock while the run lives: :mod:`plugins.rundir_lock`) and
the sink live there, out of the author's face. It reads the files an executor names as artifacts
(through :mod:`plugins.artifact_files`); it never sees a tracker or a lease (the sink is the
worker's, or a list in tests), and of the rail it imports the data models only
(:mod:`tracker_client.models`, :mod:`tracker_client.agent_models`).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from plugins.agent import AgentSink, AgentUnsupported, Store, checkpoint_json
from plugins.context_hooks import ContextHooks, ContextSink, ReportPolicy, check_cost
from tracker_client.agent_models import Upstream
from tracker_client.models import ArtifactCreate, Run, Task

__all__ = [
    "ENTRY_POINT_GROUP",
    "ContextSink",
    "ExecutionContext",
    "Executor",
    "ExecutorFactory",
    "Failure",
    "NamedTrigger",
    "Outcome",
    "ReportPolicy",
    "SupportsLeftovers",
    "SupportsReadiness",
    "SupportsTriggers",
    "Transition",
]

#: The entry-point group third-party executors register under.
ENTRY_POINT_GROUP = "backlog_worker.executors"


@dataclass(frozen=True, slots=True)
class Transition:
    """Success: move the task on with ``trigger``.

    ``trigger=None`` lets the worker choose it for the task's pipeline and stage (a role's
    ``[roles.triggers]``, the stage's only way out, its ``default_trigger``: see
    :mod:`worker.triggers`). ``source`` says where the executor got its answer (``exit code 0 of
    command 'x'``) for the error when the trigger is refused; it does not take part in equality.
    ``wait_for``: task ids (e.g. from ``ctx.spawn``) the task then waits for: the dependency
    edges are added with the move, so its next stage is claimed only when all are terminal.
    """

    trigger: str | None = None
    instructions: str | None = None
    usage: Any = None
    source: str | None = field(default=None, compare=False)
    wait_for: Sequence[str] = ()

    def __post_init__(self) -> None:
        wait_for = self.wait_for
        if type(wait_for) is not tuple:  # (most outcomes: the default (), set as it is)
            if isinstance(wait_for, str):
                raise ValueError("Transition.wait_for must be a list of task ids, not one string")
            object.__setattr__(self, "wait_for", tuple(wait_for))


@dataclass(frozen=True, slots=True)
class Failure:
    """Failure: the run is failed; ``retryable=False`` asks the worker not to retry.

    ``reason`` is a short stable code (``timeout``, ``nullclaw_config_error``, ...);
    ``message`` is the human text; ``details`` goes into the ``error`` event.
    """

    reason: str
    message: str = ""
    retryable: bool = True
    details: Mapping[str, Any] = field(default_factory=dict)
    usage: Any = None


Outcome = Transition | Failure


#: The worker's hooks ``ExecutionContext`` carried in 0.1 and their home now (the runner's
#: :class:`~plugins.context_hooks.ContextHooks`): they still work, with a warning, until 0.2.
_RETIRED: dict[str, tuple[str, str]] = {
    "take_reports": ("take_reports", "the worker takes a run's last reports itself"),
    "has_buffered_reports": ("has_buffered_reports", "the worker reads its own report buffer"),
    "workdir_created": ("workdir_created", "the worker removes the working directory itself"),
    "release_workdir": ("release_workdir", "the worker lets the working directory go itself"),
    "report_policy": (
        "policy",
        "the worker (and the test harness) writes buffered reports every flush_interval_s, "
        "so an executor needs no timer of its own",
    ),
}


class ExecutionContext:
    """Everything an executor gets for one run.

    Attributes: ``task``, ``run``, ``attempt``, ``workdir`` (this run's own directory, created
    on first access so executors that never touch files don't pay for it),
    ``instructions`` (of the transition that led here, if any), ``options`` (the role's
    executor options), ``logger``, ``deadline`` (``anyio.current_time()`` seconds, or None),
    ``traceparent`` (the run's trace context when the worker traces, or None),
    ``previous_checkpoint`` (the latest checkpoint of the task's earlier attempts, or None) and
    ``upstream`` (the task's dependencies as they ended, read when the run starts at a later
    stage; ``await read_upstream()`` reads them any time). Agent calls (``store``, ``spawn``,
    ``checkpoint``) go to a sink implementing :class:`plugins.agent.AgentSink`.

    What the runner keeps of the run (the report buffer, whether the working directory was made
    and its lock, the sink) is in the :class:`~plugins.context_hooks.ContextHooks` it builds the
    context with, not here: the executor's face is the members above.
    """

    def __init__(
        self,
        task: Task,
        run: Run,
        hooks: ContextHooks,
        options: Mapping[str, Any] | None = None,
        instructions: str | None = None,
        deadline: float | None = None,
        shutdown: anyio.Event | None = None,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        traceparent: str | None = None,
        previous_checkpoint: Any = None,
        upstream: list[Upstream] | None = None,
    ) -> None:
        """``hooks``: the run's report buffer, working directory and sink, which the runner
        builds and keeps (:class:`plugins.context_hooks.ContextHooks`). The worker passes them
        positionally (calling a class with keywords makes a dict of them on CPython 3.11, once
        per run); the constructor is the runner's, not the executor's
        (docs/reference/stability.md)."""
        self.task = task
        self.run = run
        self.attempt = run.attempt
        self.options: Mapping[str, Any] = dict(options or {})
        self.instructions = instructions
        self.deadline = deadline
        #: The W3C ``traceparent`` of the worker's span for this run, when tracing is on: an
        #: executor's own spans join the run's trace under it (child processes get it as the
        #: ``TRACEPARENT`` environment variable); None otherwise.
        self.traceparent = traceparent
        self.logger = logger or logging.getLogger("backlog_worker.executor")
        self.previous_checkpoint = previous_checkpoint
        self.upstream: list[Upstream] = list(upstream or [])
        self._hooks = hooks
        self._agent_sink: AgentSink | None = None
        self._store: Store | None = None
        self._shutdown = shutdown or anyio.Event()

    if not TYPE_CHECKING:  # unseen by type checkers: a typo on ctx stays an error for them

        def __getattr__(self, name: str) -> Any:
            """The worker's hooks of 0.1, deprecated (docs/reference/stability.md): each warns
            and answers from the run's :class:`~plugins.context_hooks.ContextHooks`."""
            retired = _RETIRED.get(name)
            if retired is None:
                raise AttributeError(f"'ExecutionContext' object has no attribute {name!r}")
            target, why = retired
            warnings.warn(
                f"ExecutionContext.{name} is the worker's, not an executor's, and leaves in 0.2: "
                f"{why} (docs/reference/stability.md)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(self._hooks, target)

    # -- state ------------------------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        """This run's working directory (private to the run; created on first access)."""
        return self._hooks.workdir()

    @property
    def shutting_down(self) -> bool:
        """True once the worker started draining: finish soon or checkpoint."""
        return self._shutdown.is_set()

    async def wait_shutdown(self) -> None:
        """Block until the worker starts shutting down."""
        await self._shutdown.wait()

    def time_remaining(self) -> float | None:
        """Seconds until the deadline (never negative), or None without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - anyio.current_time())

    # -- agent calls (plugins.agent) ---------------------------------------------------------------
    @property
    def store(self) -> Store:
        """The rail's KV store (namespaced JSON values, full-text search): shared memory."""
        if self._store is None:
            self._store = Store(self._hooks.sink)
        return self._store

    def _agent(self, call: str) -> AgentSink:
        agent = self._agent_sink
        if agent is None:  # checked once: a protocol isinstance costs microseconds
            sink = self._hooks.sink
            if not isinstance(sink, AgentSink):
                raise AgentUnsupported(f"ctx.{call}: this context's sink has no agent operations")
            agent = self._agent_sink = sink
        return agent

    async def spawn(
        self,
        pipeline: str,
        title: str,
        *,
        description: str = "",
        metadata: Mapping[str, Any] | None = None,
        priority: int = 0,
        **options: Any,
    ) -> str:
        """Create a subtask (its parent: this task) in ``pipeline`` (name or id); its id.
        ``options``: any other task field (``concurrency_key``, ``run_at_ms``, ...)."""
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ValueError(
                f"ctx.spawn: metadata must be a mapping, got {type(metadata).__name__}"
            )
        fields = {"title": title, "description": description, "priority": priority, **options}
        fields["metadata"] = dict(metadata or {})
        return await self._agent("spawn").spawn(pipeline, fields)

    async def checkpoint(self, data: Any) -> None:
        """Keep ``data`` (JSON, at most 64 KiB: ``ValueError`` naming the limit, nothing kept)
        for the task's next attempt (``ctx.previous_checkpoint``). Cheap to call often: the
        latest wins and goes out with the next heartbeat, at least every few seconds, and a
        pending one before the run's report."""
        checkpoint_json(data)
        await self._agent("checkpoint").save_checkpoint(data)

    async def read_upstream(self) -> list[Upstream]:
        """Read the task's dependencies now (stage, outcome, ``result``, artifacts)."""
        self.upstream = await self._agent("read_upstream").read_upstream()
        return self.upstream

    # -- reporting --------------------------------------------------------------------------------
    async def report(self, kind: str, data: Any = None, *, flush: bool = False) -> None:
        """Record an event for this run; buffered and batched (see :class:`ReportPolicy`).

        ``flush=True`` writes it (and everything before it) now, for events that matter.
        """
        await self._hooks.report(kind, data, flush=flush)

    async def flush(self) -> None:
        """Write buffered events now (merging runs of one kind). Safe to call concurrently."""
        await self._hooks.flush()

    def report_cost(self, *, usd: float = 0.0, tokens: int = 0) -> None:
        """Count what this run spent: ``usd`` (US dollars, a float) and/or ``tokens`` (LLM
        tokens). Call it as often as you like; the figures add up and go with the run's report,
        and the rail sums them per task against its ``max_cost`` / ``max_tokens`` budgets
        (docs/operate/budgets.md). A task past one is dead-lettered ``budget_exceeded`` instead
        of running again. ``ValueError`` naming the bad figure (negative, not a number)."""
        self._hooks.add_cost(*check_cost(usd, tokens))

    async def artifact(
        self,
        kind: str,
        uri: str,
        *,
        sha256: str | None = None,
        size_bytes: int | None = None,
        meta: Any = None,
    ) -> str:
        """Record an artifact of this task and run (written at once, not batched); its id.

        The tracker stores the reference only: ``uri`` is whatever names the thing (``file://``,
        ``https://``, ...), and ``sha256``/``size_bytes`` are not checked.
        """
        await self._hooks.flush()
        return await self._hooks.sink.emit_artifact(
            ArtifactCreate(
                kind=kind,
                uri=uri,
                task_id=self.task.id,
                run_id=self.run.id,
                sha256=sha256,
                size_bytes=size_bytes,
                meta=meta,
            )
        )

    async def artifact_file(
        self,
        path: Path | str,
        *,
        kind: str = "file",
        meta: Any = None,
        copy_to: Path | str | None = None,
    ) -> str:
        """Record a file as an artifact: sha256 and size computed in a worker thread; its id.

        A relative ``path`` is the run's working directory's. The ``file://`` uri names the
        file itself, which is gone once the worker removes the run's directory (unless
        ``keep_workdirs``): pass ``copy_to`` (a file path) to copy it there first (atomically,
        hashed while copying) and record the copy. Only regular files: ValueError otherwise,
        OSError when it cannot be read or copied. Cancellation stops between 1 MiB chunks.
        """
        # imported here: a run that records no file never loads it (issue 31, start-up)
        from plugins.artifact_files import digest_file

        source = Path(path)
        if not source.is_absolute():
            source = self.workdir / source
        dest = None if copy_to is None else Path(copy_to)
        stop = threading.Event()
        try:
            digest = await anyio.to_thread.run_sync(
                digest_file, source, dest, stop, abandon_on_cancel=True
            )
        except BaseException:
            stop.set()  # a cancelled caller: the thread gives up at its next chunk
            raise
        return await self.artifact(
            kind,
            digest.path.as_uri(),
            sha256=digest.sha256,
            size_bytes=digest.size_bytes,
            meta=meta,
        )


@runtime_checkable
class Executor(Protocol):
    """Does the work of one claimed task."""

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        """Run the task and say how it went. Cancellation must be honoured promptly."""
        ...


@runtime_checkable
class SupportsReadiness(Protocol):
    """An executor that can say, before any claim, whether it is able to work."""

    async def readiness(self) -> list[str]:
        """One line per problem; an empty list means ready."""
        ...


@runtime_checkable
class SupportsLeftovers(Protocol):
    """An executor whose cancelled runs may leave work running in the worker's process (the
    ``python`` executor's abandoned threads of a plain ``def`` that ignores cancellation).

    The worker shows :meth:`leftovers` (the metric ``backlog_worker_abandoned_threads``,
    ``backlog-worker check``) and claims nothing for the role while :meth:`refusal` gives a
    reason, so a leak stays bounded (docs/operate/long-running.md).
    """

    def leftovers(self) -> tuple[int, int]:
        """``(running now, cap)``: leftovers of cancelled runs still running, and the cap."""
        ...

    def refusal(self) -> str | None:
        """Why the role must take no new run now (a sentence for the log), or None."""
        ...


@dataclass(frozen=True, slots=True)
class NamedTrigger:
    """A trigger an executor's configuration makes it send, and where it is named (for a
    message: ``exit_codes "0"``, ``triggers.approve``, ``Transition("approve") at line 12``)."""

    trigger: str
    source: str


@runtime_checkable
class SupportsTriggers(Protocol):
    """An executor that can tell, before any claim, the triggers it may name explicitly.

    ``backlog-worker check`` holds each against the transitions out of the role's stages, so a
    misspelt one fails the check instead of every run (``invalid_trigger``). What it lists is
    what it can see without running (a command's ``exit_codes``, not its ``outcome.json``).
    """

    def triggers(self) -> list[NamedTrigger]:
        """The triggers the executor may send as it is configured, each with its source."""
        ...


class ExecutorFactory(Protocol):
    """What an entry point names: called with the role's options, returns an executor.

    Raise :class:`tracker_client.errors.ExecutorError` for bad options, naming the option.
    """

    def __call__(self, options: Mapping[str, Any]) -> Executor:
        """Build an executor from a role's options."""
        ...
