"""A planner that fans out to three researchers and summarises their results (fan-in), with the
rail's store as the agents' shared memory. Three ``python`` executor functions, one per role of
examples/agents/worker.toml (put this directory on the import path; see that file).

* ``plan`` (stage ``plan``): writes the brief to the store, spawns three ``research`` subtasks
  (``ctx.spawn``: children of this task, cancelled with it) and moves on to ``summarise``
  waiting for them (``Transition(..., wait_for=ids)``: the edges are added with the move, so
  ``summarise`` is claimed only when all three are done). It checkpoints the ids first: a retry
  of the planner (a crash after spawning) reuses them instead of spawning three more.
* ``research``: reads the brief from the store, writes its finding to the store and reports it
  as its ``result`` event (what its parent's next run reads).
* ``summarise`` (stage ``summarise``): reads each subtask's ``result`` (``ctx.upstream``) and
  searches the store's findings, then reports the summary as its ``result``.

Real agents would call a model where these functions make up a sentence; the rail's side of it
(subtasks, waiting, results, memory) is exactly this.
"""

from __future__ import annotations

from plugins.api import ExecutionContext, Failure, Outcome, Transition

MEMORY = "agents"  # the store namespace these agents share
ANGLES = ("history", "physics", "travel")


async def plan(ctx: ExecutionContext) -> Outcome:
    """Spawn one research subtask per angle and wait for all of them."""
    topic = ctx.task.title
    await ctx.store.put(MEMORY, f"brief-{ctx.task.id}", {"topic": topic, "angles": ANGLES})
    previous = ctx.previous_checkpoint or {}
    ids: list[str] = list(previous.get("spawned", []))  # a retry: the subtasks exist already
    if not ids:
        for angle in ANGLES:
            ids.append(
                await ctx.spawn(
                    "research",
                    f"{topic}: {angle}",
                    metadata={"angle": angle, "brief": f"brief-{ctx.task.id}"},
                )
            )
        await ctx.checkpoint({"spawned": ids})
    await ctx.report("planned", {"subtasks": ids}, flush=True)
    return Transition("split", wait_for=ids)


async def research(ctx: ExecutionContext) -> Outcome:
    """Look at the topic from one angle; the finding goes to the store and the result event."""
    brief = await ctx.store.get(MEMORY, ctx.task.metadata["brief"])
    if brief is None:
        return Failure("no_brief", "the planner's brief is not in the store", retryable=False)
    angle = ctx.task.metadata["angle"]
    finding = f"finding on {brief['topic']} ({angle}): a made-up insight about {angle}"
    await ctx.store.put(MEMORY, f"finding-{ctx.task.id}", {"angle": angle, "text": finding})
    await ctx.report("result", {"angle": angle, "finding": finding}, flush=True)
    return Transition("complete")


async def summarise(ctx: ExecutionContext) -> Outcome:
    """Fan-in: every subtask has ended; put their results together."""
    done = [u for u in ctx.upstream if u.outcome == "done"]
    if len(done) != len(ANGLES):
        outcomes = {u.task_id: u.outcome for u in ctx.upstream}
        return Failure("subtasks_incomplete", f"subtasks ended as {outcomes}", retryable=False)
    findings = sorted((u.result["angle"], u.result["finding"]) for u in done)
    remembered = await ctx.store.search("finding", namespace=MEMORY, limit=50)
    summary = {
        "topic": ctx.task.title,
        "angles": [angle for angle, _ in findings],
        "summary": " / ".join(text for _, text in findings),
        "findings_in_memory": len(remembered),
    }
    await ctx.store.put(MEMORY, f"summary-{ctx.task.id}", summary)
    await ctx.report("result", summary, flush=True)
    return Transition("summarised")
