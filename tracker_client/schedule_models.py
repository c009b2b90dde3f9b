"""Models of the rail's periodic schedules (extension ``schedules``) and fleet-wide rate
limits (extension ``rate_limits``): what ``POST /schedules`` and ``PUT /rate-limits/{role}`` take
and what the rail stores and answers. Split from :mod:`tracker_client.models` (same base and
rules: frozen, unknown fields ignored, schemas built on first use).
"""

from typing import Any, Literal

from pydantic import Field

from tracker_client.models import _CreateModel, _Model

__all__ = ["RateLimit", "RateLimitSet", "Schedule", "ScheduleCreate"]


class ScheduleCreate(_CreateModel):
    """The body of ``POST /schedules`` (extension ``schedules``): a task every cron tick."""

    #: The schedule's name (not ``name``: ``tracker.call(name, ...)`` takes that one).
    schedule: str = Field(min_length=1, max_length=200)
    pipeline_id: str
    #: 5 fields (minute first), or 6 with seconds first; parsed by ``cronsim``.
    cron: str
    #: An IANA zone (``Europe/Paris``): the cron's wall clock, DST included.
    timezone: str = "UTC"
    title: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    priority: int = 0
    #: Ticks missed while nothing ran: ``skip`` them, or ``catch_up`` with one task for all.
    missed: Literal["skip", "catch_up"] = "skip"
    #: Update the schedule of this name if there is one (declared schedules at worker start).
    replace: bool = Field(default=False, strict=True)


class Schedule(_Model):
    """A periodic schedule stored in the rail, and where its ticks stand."""

    name: str
    pipeline_id: str
    cron: str
    timezone: str
    title: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    priority: int = 0
    missed: Literal["skip", "catch_up"] = "skip"
    paused: bool = False
    #: The next tick not yet fired (epoch ms).
    next_tick_ms: int
    last_tick_ms: int | None = None
    last_task_id: str | None = None
    #: Tasks created so far (a catch-up task counts once).
    tasks_created: int = 0
    last_error: str | None = None
    created_at_ms: int = 0
    updated_at_ms: int = 0


class RateLimitSet(_CreateModel):
    """The body of ``PUT /rate-limits/{role}`` (extension ``rate_limits``): a fleet-wide limit."""

    #: ``N/period`` (period ``s``, ``min`` or ``h``; N >= 1), e.g. ``20/min``; None = no rate.
    rate: str | None = None
    #: At most this many tasks of the role leased at once across the fleet; None = no cap.
    max_running: int | None = Field(default=None, strict=True)


class RateLimit(_Model):
    """A role's fleet-wide rate limit and concurrency cap, as stored in the rail, and its state."""

    role: str
    #: The rate as set (``5/s``), its tokens per period, and the period; None = no rate.
    rate: str | None = None
    rate_count: int | None = None
    period_ms: int | None = None
    max_running: int | None = None
    #: Tokens in the bucket now (a claim spends one), and when the next one comes (None = full
    #: or no rate).
    tokens: float | None = None
    next_token_at_ms: int | None = None
    #: Tasks of the role leased now.
    running: int = 0
    updated_at_ms: int = 0
