"""The producer's submit options, checked and turned into a :class:`TaskCreate`.

One :class:`Submission` is what ``Rail.submit`` takes as keywords (and one item of
``submit_many``). :func:`build_task` checks every option before anything is written (a bad
value is ``ValidationFailed`` naming the field) and refuses, as ``Unsupported`` naming it, an
option the tracker cannot honour (a plain NullTickets server would silently ignore it).

No I/O and no tracker: it imports the models, the errors and the capabilities only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from tracker_client.capabilities import Capabilities
from tracker_client.errors import Unsupported, ValidationFailed
from tracker_client.models import TaskCreate

__all__ = ["MAX_AHEAD_S", "Submission", "build_task", "submission_from", "to_seconds"]

#: The furthest ahead a task may be scheduled (``delay``/``run_at``): ten years. Further is
#: almost surely a unit mistake (milliseconds passed as seconds).
MAX_AHEAD_S = 10 * 366 * 86_400.0

#: Options a plain NullTickets server has no field for, with the TaskCreate field they need.
_EXTENSION_OPTIONS = {
    "delay": "delay_ms",
    "run_at": "run_at_ms",
    "dedupe_key": "dedupe_key",
    "dedupe_window": "dedupe_window_ms",
    "concurrency_key": "concurrency_key",
    "budgets": "budgets",
}


@dataclass(frozen=True)
class Submission:
    """One task to submit: the keywords of ``Rail.submit`` (``submit_many`` takes a list).

    ``pipeline`` is a pipeline's name or id; see ``Rail.submit`` for each option.
    """

    pipeline: str
    title: str
    metadata: Mapping[str, Any] | None = None
    priority: int | None = None
    delay: float | timedelta | None = None
    run_at: datetime | None = None
    dedupe_key: str | None = None
    dedupe_window: float | timedelta | None = None
    depends_on: Sequence[str] = field(default_factory=tuple)
    concurrency_key: str | None = None
    description: str = ""
    budgets: Mapping[str, Any] | None = None


def submission_from(item: Submission | Mapping[str, Any], index: int) -> Submission:
    """``item`` as a :class:`Submission`; ``TypeError`` naming an unknown or missing key."""
    if isinstance(item, Submission):
        return item
    if not isinstance(item, Mapping):
        raise TypeError(
            f"submit_many: item {index} must be a Submission or a mapping, "
            f"not {type(item).__name__}"
        )
    known = {f.name for f in fields(Submission)}
    unknown = sorted(str(k) for k in item if k not in known)
    if unknown:
        raise TypeError(
            f"submit_many: item {index}: unknown option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    missing = [k for k in ("pipeline", "title") if k not in item]
    if missing:
        raise TypeError(f"submit_many: item {index}: missing {', '.join(missing)}")
    return Submission(**item)


def to_seconds(value: float | timedelta, name: str) -> float:
    """``value`` (seconds or a timedelta) as finite, non-negative seconds, else
    ``ValidationFailed`` naming ``name``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ValidationFailed(
            f"{name} must be seconds (a number) or a timedelta, not {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValidationFailed(f"{name} must be zero or more seconds, not {value!r}")
    return seconds


def _text(value: Any, name: str, at: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationFailed(f"{at}{name} must be a non-empty string, not {value!r}")
    return value


def _schedule(sub: Submission, at: str, now_s: float) -> dict[str, int]:
    if sub.delay is not None and sub.run_at is not None:
        raise ValidationFailed(f"{at}give delay or run_at, not both")
    if sub.delay is not None:
        seconds = to_seconds(sub.delay, f"{at}delay")
        if seconds > MAX_AHEAD_S:
            raise ValidationFailed(
                f"{at}delay must be at most ten years, not {seconds:.0f} s (seconds, not ms?)"
            )
        return {"delay_ms": round(seconds * 1000)}
    if sub.run_at is not None:
        if not isinstance(sub.run_at, datetime):
            raise ValidationFailed(
                f"{at}run_at must be a datetime, not {type(sub.run_at).__name__}"
            )
        if sub.run_at.tzinfo is None or sub.run_at.utcoffset() is None:
            raise ValidationFailed(
                f"{at}run_at must be timezone-aware (a naive datetime is ambiguous): "
                "e.g. datetime.now(timezone.utc) + timedelta(minutes=10)"
            )
        when = sub.run_at.timestamp()
        if when - now_s > MAX_AHEAD_S:
            raise ValidationFailed(
                f"{at}run_at must be at most ten years ahead, not {sub.run_at.isoformat()}"
            )
        return {"run_at_ms": round(when * 1000)}  # in the past: due now
    return {}


def build_task(
    sub: Submission, pipeline_id: str, caps: Capabilities, *, now_s: float, at: str = ""
) -> TaskCreate:
    """The :class:`TaskCreate` for ``sub`` in ``pipeline_id``; every option checked first.

    ``ValidationFailed`` names a bad value; ``Unsupported`` names an option a plain NullTickets
    server cannot honour (``capabilities().task_extensions`` is False).
    """
    _text(sub.title, "title", at)
    if not isinstance(sub.description, str):
        raise ValidationFailed(f"{at}description must be a string")
    if sub.metadata is not None and not isinstance(sub.metadata, Mapping):
        raise ValidationFailed(
            f"{at}metadata must be a mapping (a JSON object), not {type(sub.metadata).__name__}"
        )
    if sub.priority is not None and (
        not isinstance(sub.priority, int) or isinstance(sub.priority, bool)
    ):
        raise ValidationFailed(f"{at}priority must be an integer, not {sub.priority!r}")
    if isinstance(sub.depends_on, (str, bytes)) or not isinstance(sub.depends_on, Sequence):
        raise ValidationFailed(
            f"{at}depends_on must be a list of task ids, not {type(sub.depends_on).__name__}"
        )
    deps = [_text(dep, "depends_on item", at) for dep in sub.depends_on]
    values: dict[str, Any] = _schedule(sub, at, now_s)
    if sub.dedupe_key is not None:
        values["dedupe_key"] = _text(sub.dedupe_key, "dedupe_key", at)
    if sub.dedupe_window is not None:
        if sub.dedupe_key is None:
            raise ValidationFailed(f"{at}dedupe_window needs a dedupe_key")
        values["dedupe_window_ms"] = round(
            to_seconds(sub.dedupe_window, f"{at}dedupe_window") * 1000
        )
    if sub.concurrency_key is not None:
        values["concurrency_key"] = _text(sub.concurrency_key, "concurrency_key", at)
    if sub.budgets is not None:  # checked by the rail, which names a bad key or value
        values["budgets"] = dict(sub.budgets) if isinstance(sub.budgets, Mapping) else sub.budgets
    used = [opt for opt, key in _EXTENSION_OPTIONS.items() if key in values]
    if used and not caps.task_extensions:
        raise Unsupported(
            f"{at}{', '.join(used)}: not supported by a plain NullTickets server (it would "
            "silently ignore it); nothing was written"
        )
    values.update(
        pipeline_id=pipeline_id,
        title=sub.title,
        description=sub.description,
        metadata=dict(sub.metadata or {}),
    )
    if sub.priority is not None:
        values["priority"] = sub.priority
    if deps:
        values["dependencies"] = deps
    return TaskCreate(**values)
