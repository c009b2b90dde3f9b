"""The synchronous producer API for non-async code (Flask, Django, scripts):
``with connect_sync(url) as rail: rail.submit(...)``.

One event-loop thread runs for the rail's lifetime (an anyio blocking portal); every call is
handed to it, so no thread is started per call and the tracker (its SQLite connection or its
HTTP connection pool) is opened once. Safe to call from several threads at once.

It touches what :mod:`tracker_client.producer.rail` touches, through it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from tracker_client.models import TaskDetail, TransitionResult
from tracker_client.ops_models import CancelResult, RequeueAllResult, RequeueResult, WaitResult
from tracker_client.producer.options import Submission
from tracker_client.producer.rail import Rail, connect

__all__ = ["SyncRail", "connect_sync"]


class SyncRail:
    """The blocking twin of :class:`~tracker_client.producer.rail.Rail`: the same methods,
    same arguments and errors, without ``await``. Open it with :func:`connect_sync`."""

    def __init__(self, url: str, token: str | None, options: Mapping[str, Any]) -> None:
        self._url, self._token, self._options = url, token, dict(options)
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._rail_cm: Any = None
        self._rail: Rail | None = None
        self._lock = threading.Lock()  # open and close from several threads at once

    def __enter__(self) -> SyncRail:
        return self.open()

    def open(self) -> SyncRail:
        """Start the event-loop thread and open the tracker (``with`` does it for you); for an
        app that keeps one rail for its lifetime: ``rail = connect_sync(url).open()``, then
        ``rail.close()`` at shutdown."""
        with self._lock:
            if self._portal is None:
                self._start()
        return self

    def _start(self) -> None:
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        try:
            self._rail_cm = connect(self._url, token=self._token, **self._options)
            self._rail = self._portal.call(self._rail_cm.__aenter__)
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            self._portal = self._portal_cm = self._rail_cm = None
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the tracker and stop the event-loop thread. Idempotent."""
        with self._lock:
            portal, portal_cm, rail_cm = self._portal, self._portal_cm, self._rail_cm
            self._portal = self._portal_cm = self._rail_cm = self._rail = None
        if portal is None or portal_cm is None:
            return
        try:
            if rail_cm is not None:
                portal.call(rail_cm.__aexit__, None, None, None)
        finally:
            portal_cm.__exit__(None, None, None)

    @property
    def rail(self) -> Rail:
        """The async rail the calls run on (in the portal's thread)."""
        if self._rail is None:
            raise RuntimeError("the rail is closed (use it inside `with connect_sync(...)`)")
        return self._rail

    def _run(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        portal = self._portal
        if portal is None:
            raise RuntimeError("the rail is closed (use it inside `with connect_sync(...)`)")

        async def call() -> Any:
            return await func(*args, **kwargs)

        return portal.call(call)

    def submit(
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
        """Create one task in ``pipeline`` (name or id); its id. See ``Rail.submit``."""
        result: str = self._run(
            self.rail.submit,
            pipeline,
            title,
            metadata=metadata,
            priority=priority,
            delay=delay,
            run_at=run_at,
            dedupe_key=dedupe_key,
            dedupe_window=dedupe_window,
            depends_on=depends_on,
            concurrency_key=concurrency_key,
            idempotency_key=idempotency_key,
            description=description,
            budgets=budgets,
        )
        return result

    def submit_many(
        self,
        items: Iterable[Submission | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> list[str]:
        """Create many tasks, all or nothing; ids in order. See ``Rail.submit_many``."""
        listed = list(items)  # read the caller's iterable in the caller's thread
        result: list[str] = self._run(
            self.rail.submit_many, listed, idempotency_key=idempotency_key
        )
        return result

    def wait(self, task_id: str, timeout: float | timedelta) -> WaitResult:
        """Block until the task is finished or ``timeout`` passes. See ``Rail.wait``."""
        result: WaitResult = self._run(self.rail.wait, task_id, timeout)
        return result

    def task(self, task_id: str) -> TaskDetail:
        """The task with its latest run and dependencies. See ``Rail.task``."""
        result: TaskDetail = self._run(self.rail.task, task_id)
        return result

    def cancel(self, task_id: str, *, reason: str = "cancelled") -> CancelResult:
        """Cancel a waiting or running task. See ``Rail.cancel``."""
        result: CancelResult = self._run(self.rail.cancel, task_id, reason=reason)
        return result

    def transition(
        self,
        task_id: str,
        trigger: str,
        *,
        expected_stage: str | None = None,
        instructions: str | None = None,
        idempotency_key: str | None = None,
    ) -> TransitionResult:
        """Move a task waiting at a human step. See ``Rail.transition``."""
        result: TransitionResult = self._run(
            self.rail.transition,
            task_id,
            trigger,
            expected_stage=expected_stage,
            instructions=instructions,
            idempotency_key=idempotency_key,
        )
        return result

    def requeue(
        self, task_id: str, *, stage: str | None = None, reset_attempts: bool = True
    ) -> RequeueResult:
        """Bring a dead-lettered or cancelled task back. See ``Rail.requeue``."""
        result: RequeueResult = self._run(
            self.rail.requeue, task_id, stage=stage, reset_attempts=reset_attempts
        )
        return result

    def requeue_dead_letters(
        self,
        pipeline: str,
        *,
        reason: str | None = None,
        since: float | timedelta | None = None,
        stage: str | None = None,
        dry_run: bool = False,
        reset_attempts: bool = True,
    ) -> RequeueAllResult:
        """Requeue a pipeline's dead letters. See ``Rail.requeue_dead_letters``."""
        result: RequeueAllResult = self._run(
            self.rail.requeue_dead_letters,
            pipeline,
            reason=reason,
            since=since,
            stage=stage,
            dry_run=dry_run,
            reset_attempts=reset_attempts,
        )
        return result


def connect_sync(url: str, *, token: str | None = None, **options: Any) -> SyncRail:
    """A :class:`SyncRail` for ``url`` (as :func:`~tracker_client.producer.rail.connect`); use
    it as ``with connect_sync(url, token=...) as rail:`` (opened on enter, closed on exit)."""
    return SyncRail(url, token, options)
