"""``backlog-worker limit set|list|clear``: fleet-wide rate limits and caps per role in the rail.

The operator's face of the tracker's ``rate_limits`` extension: the limit is stored in the rail,
so every worker process claiming on it obeys the same one. The rate is checked before the
tracker is opened, so a bad flag writes nothing. It may touch the tracker (the rate-limit
operations) and the terminal.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.table import Table

from tracker_client import calls
from tracker_client.errors import ValidationFailed
from tracker_client.protocol import Tracker
from tracker_client.rules.ratelimits import parse_rate
from tracker_client.schedule_models import RateLimit
from worker.cli.ops.common import (
    EXIT_USAGE,
    OpsContext,
    OpsError,
    common_options,
    fmt_ms,
    input_errors,
)

__all__ = ["limit_group"]


@click.group("limit")
def limit_group() -> None:
    """Fleet-wide claim rates and caps of leased tasks per role, stored in the rail."""


def _table(limits: list[RateLimit]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("role", "rate", "tokens", "next token", "max running", "running"):
        table.add_column(column)
    for lim in limits:
        table.add_row(
            lim.role,
            lim.rate or "-",
            "-" if lim.tokens is None else f"{lim.tokens:g}",
            fmt_ms(lim.next_token_at_ms) if lim.next_token_at_ms else "-",
            "-" if lim.max_running is None else str(lim.max_running),
            str(lim.running),
        )
    return table


def _check(rate: str | None, max_running: int | None) -> None:
    """The flags as the rail checks them; ``OpsError`` naming the flag, before any write."""
    try:
        if rate is not None:
            parse_rate(rate)
        if rate is None and max_running is None:
            raise ValidationFailed("rate: give --rate and/or --max-running")
        if max_running is not None and max_running < 1:
            raise ValidationFailed(f"max_running: must be 1 or more, got {max_running}")
    except ValidationFailed as exc:
        field, _, why = str(exc).partition(": ")
        raise OpsError(f"--{field.replace('_', '-')}: {why}", EXIT_USAGE) from None


@limit_group.command("set")
@click.argument("role")
@click.option("--rate", metavar="N/PERIOD", help="Claims per period: 20/min, 5/s, 100/h.")
@click.option("--max-running", type=int, default=None, help="At most N tasks leased at once.")
@common_options
def set_(
    role: str,
    rate: str | None,
    max_running: int | None,
    tracker_url: str | None,
    config_path: Path | None,
    as_json: bool,
) -> None:
    """Limit ROLE's claims across every worker: --rate and/or --max-running."""
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        _check(rate, max_running)

    async def run(tracker: Tracker) -> int:
        limit = await calls.SET_RATE_LIMIT.call(tracker, role, rate=rate, max_running=max_running)
        if ops.as_json:
            ops.emit_json(limit)
        else:
            ops.print(f"limited role {role}")
            ops.print(_table([limit]))
        return 0

    ops.run(run)


@limit_group.command("list")
@common_options
def list_(tracker_url: str | None, config_path: Path | None, as_json: bool) -> None:
    """Every role's limit, with its tokens, next token and leased tasks."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def run(tracker: Tracker) -> int:
        limits = await calls.LIST_RATE_LIMITS.call(tracker)
        ops.emit_list(limits, _table, "no rate limits")
        return 0

    ops.run(run)


@limit_group.command("clear")
@click.argument("role")
@common_options
def clear(role: str, tracker_url: str | None, config_path: Path | None, as_json: bool) -> None:
    """Remove ROLE's limit: its claims are no longer limited."""
    ops = OpsContext.build(tracker_url, config_path, as_json)

    async def run(tracker: Tracker) -> int:
        limit = await calls.CLEAR_RATE_LIMIT.call(tracker, role)
        if ops.as_json:
            ops.emit_json(limit)
        else:
            ops.print(f"cleared the limit of role {role}")
        return 0

    ops.run(run)
