"""Health and per-role queue figures. Runs on the database thread inside a read transaction."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from tracker_client.models import QueueStats, RoleStats
from tracker_client.rules.common import Ctx

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import Health

__all__ = ["VERSION", "health", "ping", "queue_stats"]

#: Reported by ``health()`` as the tracker's version.
VERSION = "backlog-worker-embedded/1"


def health(ctx: Ctx) -> Health:
    """Tasks per stage name (across pipelines) and the number of live leases."""
    # a worker never builds it: created on first use (tracker_client.cold_models)
    from tracker_client.models import Health, StageCount

    stages = [StageCount(stage=r[0], count=r[1]) for r in ctx.all("stats.stages")]
    active = int(ctx.scalar("stats.live_leases", (ctx.now,)))
    return Health(status="ok", version=VERSION, tasks_by_stage=stages, active_leases=active)


def ping(ctx: Ctx) -> None:
    """One statement that reads no table: the database answers (``Rail.ping``)."""
    ctx.scalar("stats.ping")


def queue_stats(ctx: Ctx, near_expiry_ms: int | None, stuck_ms: int) -> QueueStats:
    """One entry per role declared in a non-terminal state of any pipeline.

    A lease is near expiry when it ends within ``near_expiry_ms``, or, with None, when less than
    a third of its own TTL is left: a healthy lease, heartbeated every third of its TTL, never is.
    """
    now = ctx.now
    roles: list[str] = []
    stage_role: dict[tuple[str, str], str | None] = {}
    for p in ctx.pipelines.all(ctx):
        for s in p.states.values():
            stage_role[(p.id, s.name)] = s.agent_role
            if s.agent_role is not None and not s.terminal and s.agent_role not in roles:
                roles.append(s.agent_role)
    waiting: dict[str, int] = defaultdict(int)
    claimable: dict[str, int] = defaultdict(int)
    oldest: dict[str, int] = {}
    retrying: dict[str, int] = defaultdict(int)
    next_retry: dict[str, int] = {}
    scheduled: dict[str, int] = defaultdict(int)
    next_scheduled: dict[str, int] = {}
    # claimable = what some agent could claim now: eligible, dependencies resolved, and its
    # concurrency key not held by a live lease (assignments and per_state are ignored).
    # Not yet eligible = a delayed task before its run_at (scheduled), or a failed run's retry
    # waiting out its delay: a draining worker waits for a retry.
    # budgets (docs/operate/budgets.md): the cost reported by the role's open tasks
    spent_usd: dict[str, float] = defaultdict(float)
    spent_tokens: dict[str, int] = defaultdict(int)
    for role, deps_ok, key_free, eligible_at, created, run_at, usd, tokens in ctx.all(
        "stats.waiting", {"now": now}
    ):
        waiting[role] += 1
        spent_usd[role] += usd
        spent_tokens[role] += tokens
        if eligible_at > now and run_at is not None and run_at > now:
            scheduled[role] += 1
            next_scheduled[role] = min(eligible_at, next_scheduled.get(role, eligible_at))
        elif eligible_at > now:
            retrying[role] += 1
            next_retry[role] = min(eligible_at, next_retry.get(role, eligible_at))
        elif deps_ok and key_free:
            claimable[role] += 1
            if role not in oldest or created < oldest[role]:
                oldest[role] = created
    running: dict[str, int] = defaultdict(int)
    near: dict[str, int] = defaultdict(int)
    stuck: dict[str, int] = defaultdict(int)
    for role, expires, started, ttl, usd, tokens in ctx.all("stats.running", (now,)):
        running[role] += 1
        spent_usd[role] += usd
        spent_tokens[role] += tokens
        window = near_expiry_ms if near_expiry_ms is not None else (ttl or 0) / 3
        if expires <= now + window:
            near[role] += 1
        if started <= now - stuck_ms:
            stuck[role] += 1
    failed: dict[str, int] = defaultdict(int)
    for role, count in ctx.all("stats.failed"):
        failed[role] = count
    dead: dict[str, int] = defaultdict(int)
    stopped: dict[str, int] = defaultdict(int)
    for pid, from_stage, count, by_budget in ctx.all("stats.dead"):
        role = stage_role.get((pid, from_stage))
        if role is not None:
            dead[role] += count
            stopped[role] += int(by_budget or 0)
    return QueueStats(
        roles=[
            RoleStats(
                role=r,
                claimable_count=claimable[r],
                oldest_claimable_age_ms=(now - oldest[r]) if r in oldest else None,
                failed_count=failed[r],
                stuck_count=stuck[r],
                near_expiry_leases=near[r],
                waiting_count=waiting[r],
                running_count=running[r],
                dead_letter_count=dead[r],
                max_backlog_depth=max(ctx.opts.cap_for(r), 0),
                retry_waiting_count=retrying[r],
                next_retry_at_ms=next_retry.get(r),
                scheduled_count=scheduled[r],
                next_scheduled_at_ms=next_scheduled.get(r),
                spent_usd=round(spent_usd[r], 6),
                spent_tokens=spent_tokens[r],
                budget_stopped_count=stopped[r],
            )
            for r in roles
        ],
        generated_at_ms=now,
    )
