"""The async producer API: ``async with connect(url) as rail: await rail.submit(...)``.

What an application (a web handler, a script, a job) needs to put work on the rail and follow
it, without knowing pipeline ids or the tracker's models: submit by pipeline *name or id*
(names resolved once and cached), submit many all-or-nothing, wait for a result, cancel,
requeue, replay a pipeline's dead letters, read a task, move one at a human step. Works on the
embedded rail (a SQLite file), a served rail and a plain NullTickets server; on the latter an
option it cannot honour is ``Unsupported`` naming it, never silently dropped.

It touches the tracker only (opened by :func:`tracker_client.factory.open_tracker`).
"""

from __future__ import annotations

import difflib
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from tracker_client import agents
from tracker_client.capabilities import Capabilities
from tracker_client.errors import NotFound, Unsupported, ValidationFailed
from tracker_client.factory import open_tracker
from tracker_client.models import Pipeline, TaskDetail, TransitionResult
from tracker_client.ops_models import CancelResult, RequeueAllResult, RequeueResult, WaitResult
from tracker_client.producer.options import Submission, build_task, submission_from, to_seconds
from tracker_client.protocol import Tracker

__all__ = ["Rail", "connect"]


class Rail:
    """A producer's handle on a rail (see :func:`connect`). Safe for concurrent tasks.

    ``Rail(tracker)`` wraps a tracker the caller already opened (and still owns).
    """

    def __init__(self, tracker: Tracker, *, owns: bool = False) -> None:
        self.tracker = tracker
        self._owns = owns
        self._caps: Capabilities | None = None
        self._by_id: dict[str, Pipeline] = {}
        self._by_name: dict[str, Pipeline] = {}

    async def aclose(self) -> None:
        """Close the tracker if this rail opened it. Idempotent."""
        if self._owns:
            await self.tracker.aclose()

    async def capabilities(self) -> Capabilities:
        """What the tracker can do (read once)."""
        if self._caps is None:
            self._caps = await self.tracker.capabilities()
        return self._caps

    async def pipeline(self, name_or_id: str) -> Pipeline:
        """The pipeline named (or with id) ``name_or_id``; cached after the first look-up.

        An unknown one is looked up once more (it may have been created since), then
        ``NotFound`` listing the close names (or every name).
        """
        if not isinstance(name_or_id, str) or not name_or_id:
            raise ValidationFailed(f"pipeline must be a pipeline name or id, not {name_or_id!r}")
        found = self._by_name.get(name_or_id) or self._by_id.get(name_or_id)
        if found is not None:
            return found
        try:
            listed = await self.tracker.list_pipelines()
        except (NotFound, Unsupported):
            # A server that cannot list pipelines still answers one by its id.
            return await self._by_id_only(name_or_id)
        for p in listed:
            self._by_id[p.id] = p
            self._by_name.setdefault(p.name, p)
        found = self._by_name.get(name_or_id) or self._by_id.get(name_or_id)
        if found is not None:
            return found
        names = sorted(self._by_name)
        close = difflib.get_close_matches(name_or_id, names, n=3, cutoff=0.5)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else (f"pipelines: {', '.join(names)}" if names else "the rail has no pipeline yet")
        )
        raise NotFound(f"no pipeline named {name_or_id!r}: {hint}", code="pipeline_not_found")

    async def _by_id_only(self, pipeline_id: str) -> Pipeline:
        try:
            found = await self.tracker.get_pipeline(pipeline_id)
        except NotFound:
            raise NotFound(
                f"no pipeline {pipeline_id!r}: this tracker cannot list pipelines by name, "
                "pass the pipeline's id",
                code="pipeline_not_found",
            ) from None
        self._by_id[found.id] = found
        return found

    async def submit(
        self,
        pipeline: str,
        title: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        dedupe_key: str | None = None,
        dedupe_window: float | timedelta | None = None,
        depends_on: Sequence[str] = (),
        concurrency_key: str | None = None,
        idempotency_key: str | None = None,
        description: str = "",
        budgets: Mapping[str, Any] | None = None,
    ) -> str:
        """Create one task in ``pipeline`` (its name or id) and return its id.

        * ``metadata``: a JSON object the executor reads; ``priority``: higher is claimed first.
        * ``delay`` (seconds or a timedelta) or ``run_at`` (a timezone-aware datetime; a naive
          one is refused, one in the past is due now): not claimable before.
        * ``dedupe_key``: while a task with this key waits or runs, the existing task's id is
          answered instead of creating another (``dedupe_window``: also for that long after
          it finished).
        * ``depends_on``: ids of tasks this one waits for (until each reaches a terminal
          stage). They are part of the create itself, so the task and its dependencies are
          written together or not at all: a task never runs without them.
        * ``concurrency_key``: at most one running task per key.
        * ``idempotency_key``: a retry of this call with the same key answers the first id.
        * ``budgets``: this task's budgets over its pipeline's (``{"max_loops": 3, "max_runs":
          10, "max_cost": 0.5, "max_tokens": 200000}``; ``None`` values lift a cap), checked by
          the rail (docs/operate/budgets.md).

        Every option is checked before anything is written: ``ValidationFailed`` names a bad
        value (empty title, naive ``run_at``, negative ``delay``...), ``Unsupported`` an option
        the tracker cannot honour (on a plain NullTickets server: ``delay``, ``run_at``,
        ``dedupe_key``, ``concurrency_key``), ``NotFound`` an unknown pipeline or dependency;
        an unknown keyword is a ``TypeError``.
        """
        sub = Submission(
            pipeline=pipeline,
            title=title,
            metadata=metadata,
            priority=priority,
            delay=delay,
            run_at=run_at,
            dedupe_key=dedupe_key,
            dedupe_window=dedupe_window,
            depends_on=depends_on,
            concurrency_key=concurrency_key,
            description=description,
            budgets=budgets,
        )
        key = _key(idempotency_key)
        spec = build_task(
            sub, (await self.pipeline(pipeline)).id, await self.capabilities(), now_s=time.time()
        )
        return await self.tracker.create_task(spec, idempotency_key=key)

    async def submit_many(
        self,
        items: Iterable[Submission | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> list[str]:
        """Create many tasks, all or nothing; their ids in input order.

        Each item is a :class:`Submission` or a mapping of ``submit``'s keywords (``pipeline``
        and ``title`` required; an unknown key is a ``TypeError`` naming it). Every item is
        checked first (errors say which item), then one bulk create writes them all. A remote
        tracker splits a batch larger than the server's request limit into several requests,
        which are then no longer atomic together (see ``RemoteTracker.create_tasks``).
        """
        key = _key(idempotency_key)
        subs = [submission_from(item, i) for i, item in enumerate(items)]
        if not subs:
            raise ValidationFailed("submit_many needs at least one item")
        caps, now_s = await self.capabilities(), time.time()
        specs = [
            build_task(s, (await self.pipeline(s.pipeline)).id, caps, now_s=now_s, at=f"item {i}: ")
            for i, s in enumerate(subs)
        ]
        return await self.tracker.create_tasks(specs, idempotency_key=key)

    async def wait(self, task_id: str, timeout: float | timedelta) -> WaitResult:  # noqa: ASYNC109 (the documented signature; the tracker bounds it)
        """Block until the task is finished (terminal, dead-lettered, cancelled, expired) or
        ``timeout`` (seconds or a timedelta) passes: ``finished`` is False then.

        Answered by the tracker where it can (embedded, served: a long poll), by polling the
        task on a plain NullTickets server.
        """
        seconds = to_seconds(timeout, "timeout")
        return await self.tracker.wait(_id(task_id), timeout_s=seconds)

    async def task(self, task_id: str) -> TaskDetail:
        """The task with its latest run, dependencies and available transitions."""
        return await self.tracker.get_task(_id(task_id))

    async def cancel(self, task_id: str, *, reason: str = "cancelled") -> CancelResult:
        """Make a waiting task unclaimable, or revoke a running task's lease.

        ``Conflict`` when it already finished; ``Unsupported`` on a plain NullTickets server.
        """
        if not isinstance(reason, str) or not reason:
            raise ValidationFailed(f"reason must be a non-empty string, not {reason!r}")
        return await self.tracker.cancel(_id(task_id), reason=reason)

    async def transition(
        self,
        task_id: str,
        trigger: str,
        *,
        expected_stage: str | None = None,
        instructions: str | None = None,
        idempotency_key: str | None = None,
    ) -> TransitionResult:
        """Move a task waiting at a human step (a stage with no role) along ``trigger``; the
        ``instructions`` reach the next stage's run. ``expected_stage`` None: the task's stage,
        read first (a move by someone else in between is still ``Conflict``). A retry with the
        same ``idempotency_key`` must be the same request: give ``expected_stage`` then.

        ``Conflict`` ``not_a_human_step`` / ``expected_stage_mismatch``, ``InvalidTransition``
        listing the allowed triggers; ``Unsupported`` on a plain NullTickets server.
        """
        if not isinstance(trigger, str) or not trigger:
            raise ValidationFailed(f"trigger must be a non-empty string, not {trigger!r}")
        return await agents.transition_task(
            self.tracker,
            _id(task_id),
            trigger,
            expected_stage=expected_stage,
            instructions=instructions,
            idempotency_key=_key(idempotency_key),
        )

    async def requeue(
        self, task_id: str, *, stage: str | None = None, reset_attempts: bool = True
    ) -> RequeueResult:
        """Bring a dead-lettered or cancelled task back (to ``stage``, default where it was),
        with a fresh retry budget unless ``reset_attempts=False``."""
        return await self.tracker.requeue(_id(task_id), stage=stage, reset_attempts=reset_attempts)

    async def requeue_dead_letters(
        self,
        pipeline: str,
        *,
        reason: str | None = None,
        since: float | timedelta | None = None,
        stage: str | None = None,
        dry_run: bool = False,
        reset_attempts: bool = True,
    ) -> RequeueAllResult:
        """Requeue ``pipeline``'s dead letters (only those dead-lettered for ``reason``, and/or
        within the last ``since`` seconds), in small batches; ``dry_run`` counts, writes nothing.

        ``Unsupported`` on a plain NullTickets server.
        """
        since_ms = None if since is None else max(1, round(to_seconds(since, "since") * 1000))
        found = await self.pipeline(pipeline)
        result: RequeueAllResult = await self.tracker.call(
            "requeue_all",
            pipeline_id=found.id,
            reason=reason,
            since_ms=since_ms,
            stage=stage,
            dry_run=dry_run,
            reset_attempts=reset_attempts,
        )
        return result


def _id(task_id: str) -> str:
    if not isinstance(task_id, str) or not task_id:
        raise ValidationFailed(f"task_id must be a non-empty string, not {task_id!r}")
    return task_id


def _key(key: str | None) -> str | None:
    if key is not None and (not isinstance(key, str) or not key):
        raise ValidationFailed(f"idempotency_key must be a non-empty string, not {key!r}")
    return key


@asynccontextmanager
async def connect(url: str, *, token: str | None = None, **options: Any) -> AsyncIterator[Rail]:
    """Open the rail ``url`` names for producing: ``sqlite:///path.db`` or a bare path (the
    embedded rail, which must exist: ``NoRail`` otherwise) or ``http(s)://host:port`` (a served
    rail or NullTickets; ``token`` is its admin token). ``options`` go to
    :func:`~tracker_client.factory.open_tracker`. Closed when the block ends.
    """
    tracker = await open_tracker(url, api_token=token, create=False, **options)
    rail = Rail(tracker, owns=True)
    try:
        await rail.capabilities()
        yield rail
    finally:
        await rail.aclose()
