"""The rail's MCP tools and resources, on the official SDK's server (docs/submit/mcp.md).

:func:`build_server` puts them on an ``MCPServer`` over a producer
:class:`~tracker_client.producer.Rail`, so they work on every rail (embedded file, served,
PostgreSQL) and do exactly what the rail's credentials allow: on a served rail with a scoped
``producer`` token, a task outside its pipelines is the rail's ``403``, answered as a tool
error naming the scope. Every refusal of the rail (unknown pipeline, bad value, conflict) is
a tool error carrying the rail's own words; nothing is retried behind the agent's back.

The tools take the API's field types (title, priority and dedupe key bounds of
:class:`~tracker_client.models.TaskCreate`) and answer the API's models
(:class:`~tracker_client.models.TaskDetail`, :class:`~tracker_client.ops_models.WaitResult`,
...), so their schemas are the API's.

*Bound to a task* (``task_id``; the nullclaw executor's offer to the agent working a task,
docs/executors/nullclaw.md): every task submitted becomes a subtask of it (cancelling it
cancels them) and every store write is kept as ``{"value": ..., "task_id": ...}``, so what an
agent remembered says which task wrote it.

It may touch the rail it is given only; it imports the SDK (the ``mcp`` extra).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from tracker_client import agents
from tracker_client.bounds import MAX_DEDUPE_KEY_CHARS, MAX_TITLE_CHARS, Int64
from tracker_client.errors import BacklogWorkerError, TokenRefused, TrackerError
from tracker_client.models import (
    Artifact,
    Page,
    Pipeline,
    StoreEntry,
    Task,
    TaskDetail,
    TransitionResult,
)
from tracker_client.ops_models import CancelResult, WaitResult
from tracker_client.producer.options import Submission, build_task
from tracker_client.producer.rail import Rail
from tracker_client.urlmask import mask_url

__all__ = ["MAX_WAIT_S", "StoreWritten", "Submitted", "build_server"]

#: The longest one ``wait`` call blocks: an agent's tool call should not hang for minutes
#: (call it again to go on waiting).
MAX_WAIT_S = 60.0
#: The most items one ``list_tasks`` / ``task_artifacts`` / ``store_search`` call answers.
MAX_PAGE = 200

T = TypeVar("T")

TaskId = Annotated[str, Field(min_length=1, description="The task's id.")]
PipelineRef = Annotated[str, Field(min_length=1, description="A pipeline's name (or id).")]
Namespace = Annotated[str, Field(min_length=1, description="The store's namespace.")]
Key = Annotated[str, Field(min_length=1, description="The entry's key in its namespace.")]


class Submitted(BaseModel):
    """What ``submit`` did: the task's id (an existing one's when ``dedupe_key`` matched), and
    its parent when the server is bound to a task."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    parent_id: str | None = None


class StoreWritten(BaseModel):
    """What ``store_put`` wrote: where, and the task it is recorded for (a bound server)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    key: str
    task_id: str | None = None


def _refusal(exc: BacklogWorkerError) -> ToolError:
    """The rail's refusal as a tool error: its kind, its code, its own message (a password in
    a URL it quotes masked)."""
    if isinstance(exc, TokenRefused):
        what = (
            "the rail refused this server's token"
            if exc.status == 401
            else "this server's credentials do not allow it"
        )
        text = f"{what} ({exc.status}): {exc.detail}"
    elif isinstance(exc, TrackerError):
        text = f"{type(exc).__name__} ({exc.code}): {exc}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return ToolError(mask_url(text))


async def _call(fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return await fn()
    except BacklogWorkerError as exc:
        raise _refusal(exc) from exc


def build_server(
    rail: Rail, *, task_id: str | None = None, name: str = "backlog-worker"
) -> MCPServer[Any]:
    """An SDK ``MCPServer`` with the rail's tools and resources (see the module docstring).

    ``task_id``: bind the server to that task (its submissions become subtasks, its store
    writes carry the task's id).
    """
    from tracker_client.version import package_version

    bound = task_id
    server: MCPServer[Any] = MCPServer(
        name,
        version=package_version(),  # the initialize answer's serverInfo.version
        log_level="WARNING",  # stderr only; stdout is the protocol's on stdio
        instructions=(
            "Tools of a backlog-worker rail: submit tasks to pipelines, wait for them, read "
            "their results and artifacts, cancel them, list a pipeline's tasks, search and "
            "write the shared store, move a task waiting at a human step."
            + (f" Bound to task {bound}: tasks you submit become its subtasks." if bound else "")
        ),
    )

    @server.tool()
    async def submit(
        pipeline: PipelineRef,
        title: Annotated[str, Field(min_length=1, max_length=MAX_TITLE_CHARS)],
        description: str = "",
        metadata: Annotated[
            dict[str, Any] | None, Field(description="A JSON object the executor reads.")
        ] = None,
        priority: Annotated[Int64 | None, Field(description="Higher is claimed first.")] = None,
        dedupe_key: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=MAX_DEDUPE_KEY_CHARS,
                description="While a task with this key waits or runs, its id is answered "
                "instead of creating another.",
            ),
        ] = None,
        depends_on: Annotated[
            list[str] | None, Field(description="Ids of tasks this one waits for.")
        ] = None,
        budgets: Annotated[
            dict[str, float | int | None] | None,
            Field(
                description="This task's budgets over its pipeline's: max_loops (re-entries "
                "of one stage), max_runs, max_cost (USD), max_tokens; null lifts a cap. A task "
                "past one is dead-lettered budget_exceeded."
            ),
        ] = None,
    ) -> Submitted:
        """Create a task in a pipeline (by name); answers its id. When this server is bound
        to a task, the new task is its subtask."""

        async def create() -> str:
            if bound is None:
                return await rail.submit(
                    pipeline,
                    title,
                    description=description,
                    metadata=metadata,
                    priority=priority,
                    dedupe_key=dedupe_key,
                    depends_on=tuple(depends_on or ()),
                    budgets=budgets,
                )
            # Bound: the same checked options, created as the task's child (extension
            # ``subtasks``; metadata.parent_id on a rail without it).
            sub = Submission(
                pipeline=pipeline,
                title=title,
                description=description,
                metadata=metadata,
                priority=priority,
                dedupe_key=dedupe_key,
                depends_on=tuple(depends_on or ()),
                budgets=budgets,
            )
            found = await rail.pipeline(pipeline)
            spec = build_task(sub, found.id, await rail.capabilities(), now_s=time.time())
            return await agents.spawn(rail.tracker, spec, parent_id=bound)

        return Submitted(task_id=await _call(create), parent_id=bound)

    @server.tool()
    async def wait(
        task_id: TaskId,
        timeout_s: Annotated[
            float,
            Field(
                gt=0,
                le=MAX_WAIT_S,
                description=f"Seconds to wait, at most {MAX_WAIT_S:g}; call again to go on.",
            ),
        ] = 30.0,
    ) -> WaitResult:
        """Wait until the task finishes or the timeout passes; answers its status, result
        event and artifacts either way (``finished`` false, ``outcome`` pending, on timeout)."""
        return await _call(lambda: rail.wait(task_id, timeout_s))

    @server.tool()
    async def get_task(task_id: TaskId) -> TaskDetail:
        """The task: its stage, latest run, dependencies and available transitions."""
        return await _call(lambda: rail.task(task_id))

    @server.tool()
    async def task_artifacts(
        task_id: TaskId, limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 50
    ) -> list[Artifact]:
        """The artifacts the task's runs recorded (files, links), oldest first."""
        page = await _call(lambda: rail.tracker.list_artifacts(task_id=task_id, limit=limit))
        return page.items

    @server.tool()
    async def cancel(task_id: TaskId, reason: str = "cancelled") -> CancelResult:
        """Cancel a waiting or running task (and its unfinished subtasks)."""
        return await _call(lambda: rail.cancel(task_id, reason=reason or "cancelled"))

    @server.tool()
    async def list_tasks(
        pipeline: PipelineRef,
        stage: str | None = None,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[
            str | None, Field(description="next_cursor of the previous page.")
        ] = None,
    ) -> Page[Task]:
        """A pipeline's tasks in creation order (optionally of one stage), a page at a time."""

        async def page() -> Page[Task]:
            found = await rail.pipeline(pipeline)
            return await rail.tracker.list_tasks(
                pipeline_id=found.id, stage=stage, limit=limit, cursor=cursor
            )

        return await _call(page)

    @server.tool()
    async def store_search(
        query: Annotated[str, Field(min_length=1, description="Every word must match.")],
        namespace: str | None = None,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 10,
    ) -> list[StoreEntry]:
        """Full-text search of the shared store (all namespaces, or one), best first."""
        return await _call(
            lambda: rail.tracker.store_search(query, namespace=namespace, limit=limit)
        )

    @server.tool()
    async def store_get(namespace: Namespace, key: Key) -> StoreEntry:
        """One entry of the shared store."""
        return await _call(lambda: rail.tracker.store_get(namespace, key))

    @server.tool()
    async def store_put(namespace: Namespace, key: Key, value: Any) -> StoreWritten:
        """Write (or replace) an entry of the shared store with a JSON value. When this server
        is bound to a task, the entry is ``{"value": ..., "task_id": ...}``."""
        stored = value if bound is None else {"value": value, "task_id": bound}
        await _call(lambda: rail.tracker.store_put(namespace, key, stored))
        return StoreWritten(namespace=namespace, key=key, task_id=bound)

    @server.tool()
    async def transition(
        task_id: TaskId,
        trigger: Annotated[str, Field(min_length=1)],
        instructions: Annotated[
            str | None, Field(description="What the next stage's run is told.")
        ] = None,
        expected_stage: Annotated[
            str | None, Field(description="Refuse if the task is no longer in this stage.")
        ] = None,
    ) -> TransitionResult:
        """Act on a task waiting at a human step (a stage with no role): move it along
        ``trigger`` (e.g. approve or reject), with instructions for the next stage."""
        return await _call(
            lambda: rail.transition(
                task_id, trigger, expected_stage=expected_stage, instructions=instructions
            )
        )

    @server.resource("backlog://pipelines", mime_type="application/json")
    async def pipelines() -> str:
        """Every pipeline of the rail: name, id and definition (stages, transitions)."""
        listed: list[Pipeline] = await _call(rail.tracker.list_pipelines)
        return json.dumps([p.model_dump(mode="json") for p in listed])

    @server.resource("backlog://queue", mime_type="application/json")
    async def queue() -> str:
        """The queue's state per role: waiting, running, dead letters, oldest wait."""
        stats = await _call(rail.tracker.queue_stats)
        return stats.model_dump_json()

    return server
