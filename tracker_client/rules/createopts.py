"""Task creation's delay and dedupe options: when a new task becomes claimable, and which
waiting/running (or recently finished) task a create with a dedupe key answers instead.

Runs on the database thread inside the create's ``BEGIN IMMEDIATE`` transaction, so the dedupe
look-up and the insert it guards are one atomic step for every process sharing the file. It
reads the ``tasks`` table only; the insert itself stays in :mod:`.tasks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracker_client.bounds import MAX_DEDUPE_KEY_CHARS
from tracker_client.errors import ValidationFailed
from tracker_client.models import MAX_AHEAD_MS
from tracker_client.rules.common import Ctx

if TYPE_CHECKING:
    # models a worker never builds (tracker_client.cold_models)
    from tracker_client.models import TaskCreate

__all__ = ["MAX_AHEAD_MS", "MAX_DEDUPE_KEY_CHARS", "dedupe_hit", "dedupe_of", "run_at_of"]


def _ms(value: Any, what: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(f"{what} must be an integer (milliseconds), got {value!r}")
    if value < 0:
        raise ValidationFailed(f"{what} must not be negative, got {value}")
    if value > high:
        raise ValidationFailed(
            f"{what} is more than ten years ahead ({value}); is it in the wrong unit?"
        )
    return value


def run_at_of(ctx: Ctx, spec: TaskCreate, at: str) -> int | None:
    """The time the task was scheduled for (None = due at once); ``run_at_ms`` in the past is
    kept as given and is due now. Refuses both options, negative and absurdly far values."""
    if spec.run_at_ms is not None and spec.delay_ms is not None:
        raise ValidationFailed(f"{at}give run_at_ms or delay_ms, not both")
    if spec.delay_ms is not None:
        return ctx.now + _ms(spec.delay_ms, f"{at}delay_ms", MAX_AHEAD_MS)
    if spec.run_at_ms is not None:
        return _ms(spec.run_at_ms, f"{at}run_at_ms", ctx.now + MAX_AHEAD_MS)
    return None


def dedupe_of(spec: TaskCreate, at: str) -> tuple[str | None, int | None]:
    """The checked (dedupe_key, dedupe_window_ms); a window needs a key."""
    key, window = spec.dedupe_key, spec.dedupe_window_ms
    if key is not None and (not isinstance(key, str) or not key or len(key) > MAX_DEDUPE_KEY_CHARS):
        raise ValidationFailed(
            f"{at}dedupe_key must be a non-empty string of at most {MAX_DEDUPE_KEY_CHARS} "
            "characters"
        )
    if window is not None:
        if key is None:
            raise ValidationFailed(f"{at}dedupe_window_ms needs a dedupe_key")
        _ms(window, f"{at}dedupe_window_ms", MAX_AHEAD_MS)
    return key, window


def dedupe_hit(ctx: Ctx, key: str) -> str | None:
    """The id of the task a create with ``key`` answers instead of creating one, or None: a
    task holding the key (waiting or running, or finished less than its own
    ``dedupe_window_ms`` ago), the newest."""
    row = ctx.one("createopts.dedupe_holder", (key, ctx.now))

    return None if row is None else str(row[0])
