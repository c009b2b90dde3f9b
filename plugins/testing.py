"""Run one executor without a tracker: a test harness for plugin authors.

Modelled on Temporal's ``ActivityEnvironment``: the harness builds a :class:`Task` and a
:class:`Run` from plain arguments, gives the executor a real :class:`ExecutionContext` whose
reports and artifacts land in lists, and lets the test cancel the run or signal shutdown::

    import anyio
    import pytest
    from plugins.api import Transition
    from plugins.testing import ExecutorHarness
    from mypkg.executors import Greeter

    @pytest.mark.anyio
    async def test_greeter(tmp_path):
        harness = ExecutorHarness(title="Ada", metadata={"lang": "en"}, workdir=tmp_path)
        outcome = await harness.run(Greeter({"greeting": "hi"}))
        assert outcome == Transition(trigger="complete")
        assert harness.events == [("progress", {"said": "hi, Ada"})]

    @pytest.mark.anyio
    async def test_greeter_honours_cancel(tmp_path):
        harness = ExecutorHarness(workdir=tmp_path)
        async with anyio.create_task_group() as tg:
            tg.start_soon(harness.cancel_on_event, "progress")   # cancel once it reported
            outcome = await harness.run(SlowGreeter({}))
        assert harness.cancelled and outcome.reason == "cancelled"

The executor is called the way a worker calls it (:mod:`plugins.supervise`): the same time
limit and the same outcomes with the same messages (``timeout``: "the executor did not finish
within 2s"). One difference, on purpose and by default: an exception raised by the executor
propagates (you want the traceback in your test), and a return value that is not an outcome
raises ExecutorError with the message a worker would fail the run with. ``raise_errors=False``
ends such runs as a worker does instead (``executor_error``, ``bad_executor_output``). By
default every ``report`` is written at once, and ``events`` expands any batch the context still
made (concurrent reports), so it lists exactly what the executor reported; ``sink.written`` has
the events as a tracker would receive them. Pass ``report_policy`` to exercise batching: as a
worker does, the harness then writes buffered reports every ``flush_interval_s`` while the run
lives (the harness is the run's runner: it builds and keeps the context's
:class:`~plugins.context_hooks.ContextHooks`, as the worker does).
A ``python`` executor naming a plain ``def`` runs it in its own thread as a worker does, and
``cancel()`` abandons that thread the same way (``ctx.cancelled`` turns True).

Agents test the same way: ``ExecutorHarness(previous_checkpoint=..., upstream=[Upstream(...)],
store={"notes": {"k": 1}}, pipelines=["research"])`` hands the run what a rail would, and
``harness.sink.store`` / ``.spawned`` / ``.checkpoints`` show what ``ctx.store``,
``ctx.spawn`` and ``ctx.checkpoint`` did (the same checks as a worker's: a value that is not
JSON, a checkpoint over 64 KiB, an unknown pipeline).

It may touch a working directory (the test's, or a temporary one removed after the run), the
executor, :mod:`plugins.supervise` and the run's :mod:`plugins.context_hooks`; no tracker, no
lease, no worker.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from plugins.api import ExecutionContext, Executor, Failure, Outcome, ReportPolicy
from plugins.context_hooks import ContextHooks
from plugins.supervise import call_executor
from tracker_client.agent_models import Upstream
from tracker_client.errors import NotFound
from tracker_client.models import ArtifactCreate, Run, StoreEntry, Task, TaskCreate

__all__ = ["ExecutorHarness", "RecordingSink"]


class RecordingSink:
    """A :class:`~plugins.api.ContextSink` (and :class:`~plugins.agent.AgentSink`) that keeps
    everything in memory.

    ``written`` holds the events exactly as the context wrote them (a batch of one kind is one
    event ``{"batch": [...]}``); ``events`` expands batches back into one entry per report.
    The agent calls land in ``store`` (``{namespace: {key: value}}``; ``search`` matches every
    word of the query, case-insensitively, in the key or the value's JSON), ``spawned``
    (``(pipeline, fields, id)``; ids ``subtask-1``, ...; with ``pipelines`` set, an unknown one is
    ``NotFound`` naming it, as on a rail) and ``checkpoints`` (every ``ctx.checkpoint``, in order;
    a worker writes only the latest of those made between two heartbeats).
    """

    def __init__(
        self,
        *,
        store: Mapping[str, Mapping[str, Any]] | None = None,
        pipelines: list[str] | None = None,
        upstream: list[Upstream] | None = None,
    ) -> None:
        self.written: list[tuple[str, Any]] = []
        self.artifacts: list[ArtifactCreate] = []
        self.store: dict[str, dict[str, Any]] = {ns: dict(v) for ns, v in (store or {}).items()}
        self.pipelines = pipelines
        self.spawned: list[tuple[str, dict[str, Any], str]] = []
        self.checkpoints: list[Any] = []
        self.upstream: list[Upstream] = list(upstream or [])
        self._changed: anyio.Event | None = None

    @property
    def events(self) -> list[tuple[str, Any]]:
        """One ``(kind, data)`` per ``report`` call, in order."""
        out: list[tuple[str, Any]] = []
        for kind, data in self.written:
            if (
                isinstance(data, dict)
                and set(data) == {"batch"}
                and isinstance(data["batch"], list)
            ):
                out.extend((kind, item) for item in data["batch"])
            else:
                out.append((kind, data))
        return out

    async def emit_events(self, events: list[tuple[str, Any]]) -> None:
        """Record events in order."""
        self.written.extend(events)
        self._notify()

    async def emit_artifact(self, artifact: ArtifactCreate) -> str:
        """Record an artifact; ids are ``artifact-1``, ``artifact-2``, ..."""
        self.artifacts.append(artifact)
        self._notify()
        return f"artifact-{len(self.artifacts)}"

    # -- agent calls (plugins.agent.AgentSink), in memory ---------------------------------------
    async def store_get(self, namespace: str, key: str) -> Any:
        """The value, or None when absent."""
        return self.store.get(namespace, {}).get(key)

    async def store_put(self, namespace: str, key: str, value: Any) -> None:
        """Keep a (JSON-round-tripped) copy, as a rail would."""
        self.store.setdefault(namespace, {})[key] = json.loads(json.dumps(value))
        self._notify()

    async def store_delete(self, namespace: str, key: str) -> None:
        """Forget a key."""
        self.store.get(namespace, {}).pop(key, None)

    async def store_list(self, namespace: str) -> list[StoreEntry]:
        """The namespace's entries, sorted by key."""
        return [self._entry(namespace, k) for k in sorted(self.store.get(namespace, {}))]

    async def store_search(
        self, query: str, *, namespace: str | None, limit: int
    ) -> list[StoreEntry]:
        """Entries where every word of ``query`` occurs (key or value), in key order."""
        words = query.lower().split()
        hits: list[StoreEntry] = []
        for ns in sorted(self.store):
            if namespace is not None and ns != namespace:
                continue
            for key in sorted(self.store[ns]):
                text = f"{key} {json.dumps(self.store[ns][key], ensure_ascii=False)}".lower()
                if all(w in text for w in words):
                    hits.append(self._entry(ns, key))
        return hits[:limit]

    def _entry(self, namespace: str, key: str) -> StoreEntry:
        now = int(time.time() * 1000)
        value = self.store[namespace][key]
        return StoreEntry(
            namespace=namespace, key=key, value=value, created_at_ms=now, updated_at_ms=now
        )

    async def spawn(self, pipeline: str, fields: Mapping[str, Any]) -> str:
        """Record a subtask; its id (``subtask-N``)."""
        if self.pipelines is not None and pipeline not in self.pipelines:
            known = ", ".join(sorted(self.pipelines)) or "none"
            raise NotFound(
                f"pipeline {pipeline!r} not found (known: {known})", code="pipeline_not_found"
            )
        try:  # the worker's check: the rail's task model refuses unknown or bad fields
            TaskCreate(pipeline_id=pipeline, **fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
            )
            raise ValueError(f"ctx.spawn: bad subtask: {problems}; nothing written") from None
        child = f"subtask-{len(self.spawned) + 1}"
        self.spawned.append((pipeline, dict(fields), child))
        self._notify()
        return child

    async def save_checkpoint(self, data: Any) -> None:
        """Record a checkpoint."""
        self.checkpoints.append(data)
        self._notify()

    async def read_upstream(self) -> list[Upstream]:
        """The upstream the harness was given."""
        return list(self.upstream)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_changed(self) -> None:
        """Block until the next event or artifact is recorded."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()


class ExecutorHarness:
    """One task, one run, one working directory; ``await run(executor)`` executes it.

    ``workdir``: used as is (created if missing, never deleted); when None a temporary directory
    is made per run and removed after it unless ``keep_workdir``. ``timeout_s`` sets the
    context's deadline and ends the run with ``Failure(reason="timeout")``, as the worker does.
    ``raise_errors``: an executor's exception (or a return value that is no outcome) raises, as
    by default, or ends the run with the worker's ``Failure`` when False.
    """

    def __init__(
        self,
        *,
        title: str = "test task",
        description: str = "",
        metadata: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        run_id: str | None = None,
        pipeline_id: str = "test-pipeline",
        stage: str = "todo",
        priority: int = 0,
        attempt: int = 1,
        agent_id: str = "harness",
        role: str = "worker",
        instructions: str | None = None,
        options: Mapping[str, Any] | None = None,
        workdir: Path | None = None,
        keep_workdir: bool = False,
        timeout_s: float | None = None,
        report_policy: ReportPolicy | None = None,
        raise_errors: bool = True,
        previous_checkpoint: Any = None,
        upstream: list[Upstream] | None = None,
        store: Mapping[str, Mapping[str, Any]] | None = None,
        pipelines: list[str] | None = None,
    ) -> None:
        """The task's fields, the run's ``attempt``, and what the rail would hand the run:
        ``previous_checkpoint``, ``upstream``, the ``store``'s initial contents and the known
        ``pipelines`` for ``ctx.spawn`` (None: any name)."""
        now = int(time.time() * 1000)
        self.task = Task(
            id=task_id or str(uuid.uuid4()),
            pipeline_id=pipeline_id,
            stage=stage,
            title=title,
            description=description,
            priority=priority,
            metadata=dict(metadata or {}),
            task_version=1,
            next_eligible_at_ms=0,
            retry_delay_ms=0,
            created_at_ms=now,
            updated_at_ms=now,
        )
        self.run_model = Run(
            id=run_id or str(uuid.uuid4()),
            task_id=self.task.id,
            attempt=attempt,
            status="running",
            agent_id=agent_id,
            agent_role=role,
            started_at_ms=now,
        )
        self.instructions = instructions
        self.options: Mapping[str, Any] = dict(options or {})
        self.workdir: Path | None = workdir
        self.keep_workdir = keep_workdir
        self.timeout_s = timeout_s
        self.report_policy = report_policy or ReportPolicy(max_events=1)
        self.raise_errors = raise_errors
        self.previous_checkpoint = previous_checkpoint
        self.sink = RecordingSink(store=store, pipelines=pipelines, upstream=upstream)
        self.logger = logging.getLogger("backlog_worker.executor.harness")
        #: True when the last run ended because :meth:`cancel` was called.
        self.cancelled = False
        self.context: ExecutionContext | None = None
        self._scope: anyio.CancelScope | None = None
        self._cancel_requested = False
        self._shutdown: anyio.Event | None = None
        self._shutdown_requested = False

    # -- what the executor did ----------------------------------------------------------------
    @property
    def events(self) -> list[tuple[str, Any]]:
        """``(kind, data)`` of every report, in order (batches expanded)."""
        return self.sink.events

    @property
    def artifacts(self) -> list[ArtifactCreate]:
        """Every artifact recorded, in order."""
        return self.sink.artifacts

    def events_of(self, kind: str) -> list[Any]:
        """The data of every event of ``kind``."""
        return [data for k, data in self.sink.events if k == kind]

    # -- control ------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Cancel the running executor (as a lost lease or timeout would); also before run()."""
        self._cancel_requested = True
        if self._scope is not None:
            self._scope.cancel()

    def signal_shutdown(self) -> None:
        """Tell the executor the worker is draining (``ctx.shutting_down`` becomes True)."""
        self._shutdown_requested = True
        if self._shutdown is not None:
            self._shutdown.set()

    async def wait_for_event(self, kind: str, *, timeout_s: float = 30.0) -> Any:
        """Wait until an event of ``kind`` is recorded and return its data (TimeoutError after
        ``timeout_s``). Use it to act mid-run without sleeping."""
        with anyio.fail_after(timeout_s):
            while True:
                for k, data in self.sink.events:
                    if k == kind:
                        return data
                await self.sink.wait_changed()

    async def cancel_on_event(self, kind: str, *, timeout_s: float = 30.0) -> None:
        """Cancel the run as soon as an event of ``kind`` is recorded."""
        await self.wait_for_event(kind, timeout_s=timeout_s)
        self.cancel()

    # -- running ------------------------------------------------------------------------------
    async def run(self, executor: Executor) -> Outcome:
        """Execute once and return the outcome. Buffered reports are flushed before returning.

        A run ended by :meth:`cancel` returns ``Failure(reason="cancelled")`` (``cancelled`` is
        then True); a timeout returns ``Failure(reason="timeout")``; exceptions propagate unless
        ``raise_errors=False`` (see the class).
        """
        made_temp = self.workdir is None
        workdir = self.workdir or Path(tempfile.mkdtemp(prefix="executor-harness-"))
        await anyio.Path(workdir).mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.cancelled = False
        self._shutdown = anyio.Event()
        if self._shutdown_requested:
            self._shutdown.set()
        deadline = None if self.timeout_s is None else anyio.current_time() + self.timeout_s
        hooks = ContextHooks(self.sink, workdir, policy=self.report_policy)
        ctx = ExecutionContext(
            task=self.task,
            run=self.run_model,
            hooks=hooks,
            options=self.options,
            instructions=self.instructions,
            deadline=deadline,
            shutdown=self._shutdown,
            logger=self.logger,
            previous_checkpoint=self.previous_checkpoint,
            upstream=self.sink.upstream,
        )
        self.context = ctx
        outcome: Outcome | None = None
        error: Exception | None = None
        stop_flushing = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_flush_on_interval, hooks, stop_flushing)
                try:
                    with anyio.CancelScope() as scope:
                        self._scope = scope
                        if self._cancel_requested:
                            scope.cancel()
                        outcome = await call_executor(
                            executor, ctx, self.timeout_s, raise_errors=self.raise_errors
                        )
                except Exception as exc:  # kept out of the task group: no ExceptionGroup
                    error = exc
                finally:
                    stop_flushing.set()
        finally:
            self._scope = None
            cancel_requested, self._cancel_requested = self._cancel_requested, False
            with anyio.CancelScope(shield=True):
                await hooks.flush()
                if made_temp and not self.keep_workdir:
                    await anyio.to_thread.run_sync(shutil.rmtree, workdir, True)
                hooks.release_workdir()
        if error is not None:
            raise error
        if outcome is None:
            self.cancelled = cancel_requested
            return Failure(reason="cancelled", message="cancelled by the test harness")
        return hooks.with_cost(outcome)  # ctx.report_cost's figures, as the worker sends them


async def _flush_on_interval(hooks: ContextHooks, stop: anyio.Event) -> None:
    """Write buffered reports every ``flush_interval_s`` while the run lives, as the worker
    does, so the last events of an executor that goes quiet are seen mid-run. Stopped through
    ``stop`` (never cancelled mid-write, which would drop the batch in flight)."""
    interval = max(hooks.policy.flush_interval_s, 0.01)
    while True:
        with anyio.move_on_after(interval):
            await stop.wait()
        if stop.is_set():
            return
        if hooks.has_buffered_reports:
            try:
                await hooks.flush()
            except Exception:  # the sink's problem surfaces at the final flush
                return
