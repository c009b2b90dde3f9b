"""Task fields shared by ``task add`` and ``submit``: click options and ``TaskCreate`` builders.

Flags only: parsing and checking them touches no tracker (the commands in :mod:`.add` and
:mod:`worker.cli.ops.submit` do); a task file's pipeline names are resolved through the tracker
they pass in.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from pydantic import ValidationError

from tracker_client.models import MAX_AHEAD_MS, RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker
from tracker_client.validation import describe_validation
from worker.cli.ops.common import EXIT_USAGE, DurationType, OpsError, resolve_pipeline
from worker.cli.ops.input import (
    parse_deadline,
    parse_json_flag,
    read_jsonl,
    read_structured_file,
)

__all__ = [
    "TaskFields",
    "build_task",
    "read_task_file",
    "task_field_options",
]

F = TypeVar("F", bound=Callable[..., Any])

_DURATION = DurationType()


if TYPE_CHECKING:
    _ParamBase = click.ParamType[Any]
else:  # click < 8.2 has no generic ParamType
    _ParamBase = click.ParamType


class _AttemptsType(_ParamBase):
    """A count of failures >= 0, or ``unlimited`` (sent as ``max_attempts: null``)."""

    name = "N|unlimited"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) or value == "unlimited":
            return value
        text = str(value).strip().lower()
        if text == "unlimited":
            return text
        if text.isdigit():
            return int(text)
        self.fail(f"{value!r} is not a count >= 0 or 'unlimited'", param, ctx)


_ATTEMPTS = _AttemptsType()


def task_field_options(func: F) -> F:
    """Add the task-field options (``--pipeline``, ``--priority``, ``--metadata``, ...)."""
    options = [
        click.option("--pipeline", "-p", metavar="NAME|ID", help="The task's pipeline."),
        click.option("--description", "-d", default="", help="Longer text for the agent."),
        click.option("--priority", type=int, default=0, show_default=True, help="Higher first."),
        click.option("--metadata", "-m", metavar="JSON", help="Metadata as inline JSON."),
        click.option(
            "--metadata-file",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Metadata from a JSON or TOML file.",
        ),
        click.option(
            "--max-attempts",
            type=_ATTEMPTS,
            help="Attempts before a dead letter: the task is dead-lettered at its Nth failed "
            "run, in any stage (runs that move it on do not count), or 'unlimited' (default: "
            "the rail's, 5 unless configured).",
        ),
        click.option("--retry-delay", type=_DURATION, help="Delay before a retry (e.g. 30s)."),
        click.option(
            "--backoff",
            type=click.Choice(["constant", "exponential"]),
            help="Retry delay growth (exponential doubles up to --max-retry-delay, jittered).",
        ),
        click.option("--max-retry-delay", type=_DURATION, help="Cap of exponential backoff."),
        click.option("--dead-letter-stage", metavar="STAGE", help="Where dead tasks go."),
        click.option(
            "--depends-on", multiple=True, metavar="TASK_ID", help="Wait for this task first."
        ),
        click.option("--assign", "assign_to", metavar="AGENT_ID", help="Only this agent claims."),
        click.option("--assigned-by", metavar="WHO", help="Who assigned it (recorded)."),
        click.option("--concurrency-key", metavar="KEY", help="One running task per key."),
        click.option("--expires-at", metavar="TIME", help="Deadline while waiting (ISO 8601)."),
        click.option("--queue-ttl", type=_DURATION, help="Deadline as a TTL from now (e.g. 1h)."),
        click.option(
            "--max-stale-attempts",
            type=click.IntRange(min=1),
            help="Lease expiries in a row before dead-lettering (crash loop).",
        ),
        click.option("--idempotency-key", metavar="KEY", help="Make a retried create safe."),
        click.option(
            "--delay", type=_DURATION, help="Not claimable before this long from now (e.g. 10m)."
        ),
        click.option(
            "--at",
            "run_at",
            metavar="TIME",
            help="Not claimable before this time (ISO 8601, local when naive; past = now).",
        ),
        click.option(
            "--dedupe-key",
            metavar="KEY",
            help="While a task with this key waits or runs, answer its id instead.",
        ),
        click.option(
            "--dedupe-window",
            type=_DURATION,
            help="With --dedupe-key: keep deduping this long after that task finished.",
        ),
        click.option(
            "--budget",
            "budgets",
            metavar="KEY=VALUE",
            multiple=True,
            help="A budget of this task over its pipeline's (repeatable): max_loops=3, "
            "max_runs=10, max_cost=0.50 (USD), max_tokens=200000; =none lifts a cap.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def parse_run_at(value: str) -> int:
    """``--at``: ISO 8601 (local time when naive) or epoch ms -> epoch ms; over ten years ahead
    is refused (a unit mistake, not a plan)."""
    text = value.strip()
    try:
        when = int(text) if text.isdigit() else int(datetime.fromisoformat(text).timestamp() * 1e3)
    except ValueError:
        msg = f"--at {value!r} is neither an ISO 8601 time (2026-01-31T18:00) nor epoch ms"
        raise OpsError(msg, EXIT_USAGE) from None
    if when > time.time() * 1000 + MAX_AHEAD_MS:
        raise OpsError(f"--at {value!r} is more than ten years ahead", EXIT_USAGE)
    return when


def _ahead_ms(seconds: float, flag: str) -> int:
    """A duration flag as ms, at most ten years (``DurationType`` already refuses negatives)."""
    ms = int(seconds * 1000)
    if ms > MAX_AHEAD_MS:
        raise OpsError(f"{flag} is more than ten years", EXIT_USAGE)
    return ms


@dataclass(frozen=True)
class TaskFields:
    """The task-field flags of one invocation (each None/empty when not given)."""

    pipeline: str | None = None
    description: str = ""
    priority: int = 0
    metadata: str | None = None
    metadata_file: Path | None = None
    max_attempts: int | str | None = None
    retry_delay: float | None = None
    backoff: str | None = None
    max_retry_delay: float | None = None
    dead_letter_stage: str | None = None
    depends_on: tuple[str, ...] = ()
    assign_to: str | None = None
    assigned_by: str | None = None
    concurrency_key: str | None = None
    expires_at: str | None = None
    queue_ttl: float | None = None
    max_stale_attempts: int | None = None
    idempotency_key: str | None = None
    delay: float | None = None
    run_at: str | None = None
    dedupe_key: str | None = None
    dedupe_window: float | None = None
    budgets: tuple[str, ...] = ()

    @classmethod
    def pop_from(cls, kwargs: dict[str, Any]) -> TaskFields:
        """Take this class's fields out of a click kwargs dict."""
        names = cls.__dataclass_fields__
        return cls(**{k: kwargs.pop(k) for k in list(kwargs) if k in names})

    def metadata_value(self) -> Any:
        """The metadata given by ``--metadata`` or ``--metadata-file`` (``{}`` when neither)."""
        if self.metadata is not None and self.metadata_file is not None:
            raise OpsError("give --metadata or --metadata-file, not both", EXIT_USAGE)
        if self.metadata is not None:
            return parse_json_flag(self.metadata, "--metadata")
        if self.metadata_file is not None:
            return read_structured_file(self.metadata_file, "metadata file")
        return {}

    def retry_policy(self) -> dict[str, Any] | None:
        """The retry policy the flags ask for, or None when no retry flag is given."""
        policy: dict[str, Any] = {}
        if self.max_attempts is not None:
            policy["max_attempts"] = None if self.max_attempts == "unlimited" else self.max_attempts
        if self.retry_delay is not None:
            policy["retry_delay_ms"] = int(self.retry_delay * 1000)
        if self.backoff is not None:
            policy["backoff"] = self.backoff
        if self.max_retry_delay is not None:
            policy["max_retry_delay_ms"] = int(self.max_retry_delay * 1000)
        if self.dead_letter_stage is not None:
            policy["dead_letter_stage"] = self.dead_letter_stage
        return policy or None

    def as_payload(self, title: str) -> dict[str, Any]:
        """The TaskCreate fields these flags set (pipeline excluded)."""
        payload: dict[str, Any] = {
            "title": title,
            "description": self.description,
            "priority": self.priority,
            "metadata": self.metadata_value(),
        }
        policy = self.retry_policy()
        if policy is not None:
            payload["retry_policy"] = policy
        if self.depends_on:
            payload["dependencies"] = list(self.depends_on)
        if self.assign_to is not None:
            payload["assigned_agent_id"] = self.assign_to
        if self.assigned_by is not None:
            payload["assigned_by"] = self.assigned_by
        if self.concurrency_key is not None:
            payload["concurrency_key"] = self.concurrency_key
        if self.expires_at is not None:
            payload["expires_at_ms"] = parse_deadline(self.expires_at)
        if self.queue_ttl is not None:
            payload["queue_ttl_ms"] = int(self.queue_ttl * 1000)
        if self.max_stale_attempts is not None:
            payload["max_stale_attempts"] = self.max_stale_attempts
        payload.update(self._delay_and_dedupe())
        if self.budgets:
            payload["budgets"] = self.budget_values()
        return payload

    def budget_values(self) -> dict[str, Any]:
        """``--budget KEY=VALUE`` flags as an object (values read as JSON numbers, ``none`` as
        null); the rail checks the keys and values and names a bad one
        (docs/operate/budgets.md)."""
        out: dict[str, Any] = {}
        for flag in self.budgets:
            key, sep, text = flag.partition("=")
            if not sep or not key.strip() or not text.strip():
                raise OpsError(
                    f"--budget {flag!r}: expected KEY=VALUE, e.g. max_loops=3 or max_cost=0.5",
                    EXIT_USAGE,
                )
            value: Any = text.strip()
            if value.lower() in ("none", "null"):
                value = None
            else:
                with contextlib.suppress(ValueError):  # the rail names a non-number
                    value = json.loads(value)
            out[key.strip()] = value
        return out

    def _delay_and_dedupe(self) -> dict[str, Any]:
        """``--delay``/``--at`` and ``--dedupe-key``/``--dedupe-window`` as TaskCreate fields."""
        out: dict[str, Any] = {}
        if self.delay is not None and self.run_at is not None:
            raise OpsError("give --delay or --at, not both", EXIT_USAGE)
        if self.delay is not None:
            out["delay_ms"] = _ahead_ms(self.delay, "--delay")
        if self.run_at is not None:
            out["run_at_ms"] = parse_run_at(self.run_at)
        if self.dedupe_window is not None and self.dedupe_key is None:
            raise OpsError("--dedupe-window needs --dedupe-key", EXIT_USAGE)
        if self.dedupe_key is not None:
            if not self.dedupe_key.strip():
                raise OpsError("--dedupe-key is empty", EXIT_USAGE)
            out["dedupe_key"] = self.dedupe_key
        if self.dedupe_window is not None:
            out["dedupe_window_ms"] = _ahead_ms(self.dedupe_window, "--dedupe-window")
        return out


def _validate(payload: Mapping[str, Any], where: str) -> TaskCreate:
    try:
        return TaskCreate.model_validate(dict(payload))
    except ValidationError as exc:
        raise OpsError(f"{where}: {describe_validation(exc)}", EXIT_USAGE) from None


def build_task(pipeline_id: str, title: str, fields: TaskFields) -> TaskCreate:
    """One :class:`TaskCreate` from a title and the flags."""
    if not title.strip():
        raise OpsError("the task TITLE is empty", EXIT_USAGE)
    return _validate({**fields.as_payload(title), "pipeline_id": pipeline_id}, "task")


async def read_task_file(
    tracker: Tracker, path: Path | str, default_pipeline: str | None
) -> list[TaskCreate]:
    """Tasks from a JSON-lines file: one ``TaskCreate`` object per line.

    A line may name its pipeline by ``pipeline_id`` or ``pipeline`` (id or name); otherwise
    ``--pipeline`` applies. Retry fields may be given flat (``max_attempts``...) or nested.
    """
    cache: dict[str, str] = {}

    async def pipeline_id_of(ref: str) -> str:
        if ref not in cache:
            cache[ref] = (await resolve_pipeline(tracker, ref)).id
        return cache[ref]

    parsed: list[tuple[int, dict[str, Any]]] = list(read_jsonl(path, "task file"))
    if not parsed:
        raise OpsError(f"task file {str(path)!r} holds no tasks", EXIT_USAGE)
    tasks: list[TaskCreate] = []
    for lineno, obj in parsed:
        where = f"task file {str(path)!r} line {lineno}"
        ref = obj.pop("pipeline", None) or obj.pop("pipeline_id", None) or default_pipeline
        if not ref:
            raise OpsError(f"{where}: no pipeline (set 'pipeline' or pass --pipeline)", EXIT_USAGE)
        if not isinstance(ref, str):
            raise OpsError(f"{where}: 'pipeline' must be a string", EXIT_USAGE)
        unknown = sorted(set(obj) - set(TaskCreate.model_fields) - set(RetryPolicy.model_fields))
        if unknown:
            raise OpsError(f"{where}: unknown field {unknown[0]!r}", EXIT_USAGE)
        flat = {k: obj.pop(k) for k in list(obj) if k in RetryPolicy.model_fields}
        if flat:
            obj["retry_policy"] = {**(obj.get("retry_policy") or {}), **flat}
        obj["pipeline_id"] = await pipeline_id_of(ref)
        tasks.append(_validate(obj, where))
    return tasks
