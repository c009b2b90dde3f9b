"""What the dashboard's pages read from the rail, in the shapes their templates show.

Every read goes through the ``Tracker`` protocol. An extension the rail may lack (every run,
task events, spans, workers, schedules, rate limits) is read with :func:`optional`, which
answers None when the rail does not have it, so the page says "not available on this rail"
instead of failing. A task's state (waiting, running, failed, dead, done) is derived as
``backlog-worker task list`` derives it (:mod:`tracker_client.task_states`).

It may touch the tracker (reads only) and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tracker_client.errors import NotFound, Unsupported
from tracker_client.models import Event, Page, Pipeline, Run, Task, TaskDetail
from tracker_client.protocol import Tracker
from tracker_client.task_states import STATES as _STATES
from tracker_client.task_states import coarse_state, task_state

__all__ = [
    "STATES",
    "Attempts",
    "Catalog",
    "ListedTask",
    "Search",
    "before",
    "fresh_state",
    "last_requeue",
    "optional",
    "task_state",
]

T = TypeVar("T")

#: The states a task is in, one each (as ``task list --state`` names them).
STATES = tuple(_STATES)

#: What a rail without an extension raises when it is called (a remote rail: ``Unsupported``;
#: the table lacks the name: ``KeyError``; an embedded rail without the room: no method).
_ABSENT = (Unsupported, KeyError, AttributeError, NotImplementedError)


async def optional(read: Callable[[], Awaitable[T]]) -> T | None:
    """``await read()``, or None when the rail lacks the operation it calls."""
    try:
        return await read()
    except _ABSENT:
        return None


@dataclass
class Catalog:
    """The rail's pipelines, by id, and the stages each defines (filters, roles, states)."""

    pipelines: dict[str, Pipeline] = field(default_factory=dict)

    @classmethod
    async def read(cls, tracker: Tracker) -> Catalog:
        """Every pipeline of the rail."""
        return cls({p.id: p for p in await tracker.list_pipelines()})

    def stage(self, pipeline_id: str, stage: str) -> dict[str, Any]:
        """The definition of ``stage`` in the pipeline (empty when unknown)."""
        pipeline = self.pipelines.get(pipeline_id)
        states = (pipeline.definition.get("states") or {}) if pipeline else {}
        found = states.get(stage) if isinstance(states, dict) else None
        return found if isinstance(found, dict) else {}

    def stages(self, pipeline_id: str | None = None) -> list[str]:
        """The stage names of one pipeline, or of all, sorted and distinct."""
        scope = [self.pipelines[pipeline_id]] if pipeline_id else list(self.pipelines.values())
        names = {s for p in scope for s in (p.definition.get("states") or {})}
        return sorted(names)

    def find(self, ref: str) -> Pipeline | None:
        """A pipeline by id or by name."""
        if ref in self.pipelines:
            return self.pipelines[ref]
        return next((p for p in self.pipelines.values() if p.name == ref), None)

    def roles(self) -> list[str]:
        """Every role a stage of a pipeline names, sorted."""
        return sorted(
            {
                str(stage["agent_role"])
                for p in self.pipelines.values()
                for stage in (p.definition.get("states") or {}).values()
                if isinstance(stage, dict) and stage.get("agent_role")
            }
        )

    def human_steps(self) -> list[tuple[Pipeline, str]]:
        """Every stage marked ``"human": true`` (a person moves its tasks on), by pipeline
        name then stage (docs/guarantees/backlog.md)."""
        found = [
            (p, name)
            for p in self.pipelines.values()
            for name, stage in (p.definition.get("states") or {}).items()
            if isinstance(stage, dict) and stage.get("human") is True
        ]
        return sorted(found, key=lambda pair: (pair[0].name, pair[1]))

    def is_human_step(self, pipeline_id: str, stage: str) -> bool:
        """Whether ``stage`` of the pipeline is a human step."""
        return self.stage(pipeline_id, stage).get("human") is True

    def name(self, pipeline_id: str) -> str:
        """A pipeline's name (its id when unknown)."""
        pipeline = self.pipelines.get(pipeline_id)
        return pipeline.name if pipeline else pipeline_id


@dataclass
class ListedTask:
    """A task as the task list shows it: its pipeline's name, its role and its state."""

    task: Task
    pipeline: str
    role: str
    state: str

    @classmethod
    async def read(cls, tracker: Tracker, task: Task, catalog: Catalog) -> ListedTask:
        """Derive the row of ``task`` (an open task costs one read of its latest run)."""
        detail: TaskDetail | None = None
        if coarse_state(task, catalog.stage(task.pipeline_id, task.stage)) is None:
            try:
                detail = await tracker.get_task(task.id)
            except NotFound:  # purged between the listing and now
                detail = None
        role = catalog.stage(task.pipeline_id, task.stage).get("agent_role")
        state = task_state(task, catalog.stage(task.pipeline_id, task.stage), detail)
        if state == "failed" and detail is not None:  # only then can a requeue change it
            state = fresh_state(state, detail.latest_run, await last_requeue(tracker, task.id))
        return cls(
            task, catalog.name(task.pipeline_id), role if isinstance(role, str) else "", state
        )


#: Most ``requeued`` events read to find a task's last requeue (pages of 200).
REQUEUE_PAGES = 5


async def last_requeue(tracker: Tracker, task_id: str) -> Event | None:
    """The task's latest ``requeued`` event (None: never requeued, or the rail cannot list a
    task's events)."""
    found: Event | None = None
    cursor: str | None = None
    for _ in range(REQUEUE_PAGES):

        async def read(since: str | None = cursor) -> Page[Event]:
            return await tracker.list_task_events(task_id, limit=200, cursor=since, kind="requeued")

        page = await optional(read)
        if page is None or not page.items:
            break
        found = page.items[-1]
        cursor = page.next_cursor
        if cursor is None:
            break
    return found


def before(run: Run, requeue: Event | None) -> bool:
    """Whether ``run`` ended before ``requeue`` (a requeue needs a task with no live run, so
    every run that started by then had ended)."""
    if requeue is None:
        return False
    ended = run.ended_at_ms
    return run.started_at_ms < requeue.ts_ms or (ended is not None and ended <= requeue.ts_ms)


@dataclass(frozen=True)
class Attempts:
    """A task's attempt count as its retry policy counts it: the runs since its last requeue
    that reset the count (``counted``), out of ``total`` runs in all, against ``limit``."""

    counted: int
    total: int
    limit: int | None
    #: When the count started again (the requeue's instant), None: never requeued.
    since_ms: int | None

    @classmethod
    def of(cls, task: Task, runs: list[Run], requeue: Event | None) -> Attempts:
        """Count ``runs`` of ``task`` after ``requeue`` when it reset the attempts."""
        reset = requeue is not None and _resets(requeue)
        counted = [r for r in runs if not (reset and before(r, requeue))]
        since = requeue.ts_ms if reset and requeue is not None else None
        return cls(len(counted), len(runs), task.max_attempts, since)


def _resets(event: Event) -> bool:
    data = event.data if isinstance(event.data, dict) else {}
    return bool(data.get("reset_attempts", True))


def fresh_state(state: str, latest: Run | None, requeue: Event | None) -> str:
    """``state`` corrected for a requeue: a task whose latest run failed before it was requeued
    waits afresh (``waiting``, not ``failed``)."""
    if state == "failed" and latest is not None and before(latest, requeue):
        return "waiting"
    return state


#: Events of one task read when a search looks in events (its first page).
SEARCH_EVENTS = 200


@dataclass(frozen=True)
class Search:
    """Words to find in a task: every word, case-insensitive, in its title, description or
    metadata (as JSON), or (``in_events``) in its first :data:`SEARCH_EVENTS` events' kinds
    and data. The rail has no full-text index of tasks: this reads them."""

    words: tuple[str, ...]
    in_events: bool

    @classmethod
    def of(cls, text: str | None, in_events: bool) -> Search | None:
        """The search for ``text`` (None: no words, no search)."""
        words = tuple(w.casefold() for w in (text or "").split())
        return cls(words, in_events) if words else None

    def _all_in(self, text: str) -> bool:
        folded = text.casefold()
        return all(w in folded for w in self.words)

    async def matches(self, tracker: Tracker, task: Task) -> bool:
        """Whether every word is in the task (reading its events only when needed)."""
        meta = json.dumps(task.metadata, ensure_ascii=False, default=str)
        if self._all_in(f"{task.title}\n{task.description}\n{meta}"):
            return True
        if not self.in_events:
            return False
        page = await optional(lambda: tracker.list_task_events(task.id, limit=SEARCH_EVENTS))
        if page is None:
            return False
        text = "\n".join(
            f"{e.kind} {json.dumps(e.data, ensure_ascii=False, default=str)}" for e in page.items
        )
        return self._all_in(f"{task.title}\n{task.description}\n{meta}\n{text}")
